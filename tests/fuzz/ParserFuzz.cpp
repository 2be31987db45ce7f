// libFuzzer target for the front end. Any input must load without crashing,
// leaking or undefined behaviour; when it checks, printing it and checking the
// print must give an equal Spec (the round-trip property), else we abort.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dsl/Frontend.h"
#include "dsl/Print.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  fsdpgen::FrontendResult first = fsdpgen::load_spec_text("fuzz.fsdp", text);
  if (!first.spec) return 0;
  std::string printed = fsdpgen::print_spec(*first.spec);
  fsdpgen::FrontendResult second = fsdpgen::load_spec_text("printed.fsdp", printed);
  if (!second.spec || !(*second.spec == *first.spec)) {
    std::fprintf(stderr, "round trip failed; printed spec:\n%s\ndiagnostics:\n%s\n",
                 printed.c_str(), second.diagnostics.c_str());
    std::abort();
  }
  return 0;
}
