// libFuzzer target for hardware profiles and calibration requests: the input
// as a profile's JSON (profile::from_json, measured and as a request). A bad
// one must be a ProfileError; one that parses must print to JSON that parses
// back to the same profile, and a valid profile must be a valid request, else
// we abort.
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/profile/profile.h"
#include "tests/fuzz/Fuzz.h"

namespace {

namespace profile = fsdpgen::profile;

// Parses text as a profile (measured) or a request; false when it is invalid.
bool parse(std::string_view text, bool measured, profile::Profile* out) {
  try {
    *out = profile::from_json(text, "fuzz.json", measured);
    return true;
  } catch (const profile::ProfileError&) {
    return false;
  }
}

void check_round_trip(const profile::Profile& p, bool measured) {
  const std::string printed = profile::to_json(p);
  profile::Profile again;
  try {
    again = profile::from_json(printed, "printed.json", measured);
  } catch (const profile::ProfileError& e) {
    fuzz::broken(std::string("a printed profile parses back: ") + e.what() + "\n" + printed);
  }
  fuzz::check(profile::to_json(again) == printed, "a printed profile parses back the same");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  profile::Profile p;
  const bool is_profile = parse(text, true, &p);
  if (is_profile) check_round_trip(p, true);
  const bool is_request = parse(text, false, &p);
  if (is_request) check_round_trip(p, false);
  fuzz::check(!is_profile || is_request, "a valid profile is a valid request");
  return 0;
}
