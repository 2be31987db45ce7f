// flags: validators with readable expectations and did-you-mean for unknown flags.
#include "runtime/flags.h"

#include <fmt/format.h>

#include "runtime/suggest/suggest.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

// The app's long flag closest to `flag` (both with their dashes), if within a
// third of its length (at least 1); empty otherwise.
std::string nearest_flag(const CLI::App& app, std::string_view flag) {
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames())
      flags.push_back("--" + name);
  return fsdpgen::closest_match(flag, std::vector<std::string_view>(flags.begin(), flags.end()));
}

// The first argument CLI11 could not place, without any "=value".
std::string unknown_argument(const CLI::App& app) {
  std::vector<std::string> rest = app.remaining();
  auto flag = std::find_if(rest.begin(), rest.end(),
                           [](const std::string& a) { return a.size() > 1 && a[0] == '-'; });
  if (flag == rest.end()) return rest.empty() ? std::string() : rest.front();
  return flag->substr(0, flag->find('='));
}

std::string extras_message(const CLI::App& app) {
  std::string arg = unknown_argument(app);
  if (arg.empty() || arg[0] != '-')
    return fmt::format("unexpected argument '{}': the binary takes flags only", arg);
  std::string near = nearest_flag(app, arg);
  if (near.empty()) return fmt::format("unknown flag {}", arg);
  return fmt::format("unknown flag {}; did you mean {}?", arg, near);
}

}  // namespace

CLI::Validator whole_number(int64_t min_value) {
  std::string form = fmt::format("a whole number >= {}", min_value);
  return CLI::Validator(
      [min_value, form](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ptr != end || ec == std::errc::invalid_argument)
          return fmt::format("expected {}, got '{}'", form, text);
        if (ec == std::errc::result_out_of_range)
          return fmt::format("expected {}, got '{}', larger than {}", form, text, INT64_MAX);
        if (value < min_value) return fmt::format("expected {}, got {}", form, value);
        return {};
      },
      form);
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        double value = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !std::isfinite(value) || !(value > 0))
          return fmt::format("expected a number > 0, got '{}'", text);
        return {};
      },
      "a number > 0");
}

std::string flag_error_message(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) return extras_message(app);
  return e.what();
}
