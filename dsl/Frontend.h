// Frontend: the whole front end in one call: read, lex, parse, check. The
// pipeline is the flat list in load_spec_text(); every caller (CLI, tests,
// fuzzer) goes through it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dsl/Spec.h"
#include "dsl/SpecOverrides.h"

namespace fsdpgen {

struct FrontendResult {
  std::optional<Spec> spec;  // set when there are no errors
  std::string diagnostics;   // rendered errors, warnings and notes; empty if none
};

// `name` is how diagnostics refer to the file. load_spec_file also finds a
// relative data path (text("input.txt")) from the spec's directory: path
// specs/x.fsdp gives specs/input.txt.
FrontendResult load_spec_text(const std::string& name, std::string text,
                              const SpecOverrides& overrides = {});
FrontendResult load_spec_file(const std::string& path, const SpecOverrides& overrides = {});

}  // namespace fsdpgen
