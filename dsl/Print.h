// Print: a Spec written back in the spec language, every default spelled
// out. Parsing and checking the output gives an equal Spec (round trip);
// this is what `fsdpgen check --dump` prints.
#pragma once

#include <string>

#include "dsl/Spec.h"

namespace fsdpgen {

std::string print_spec(const Spec& spec);

// Shortest text that reads back as exactly `x` (1e-08, 0.95, 3).
std::string format_real(double x);

// `s` as a spec-language string literal: "a \"b\".txt".
std::string quote(const std::string& s);

}  // namespace fsdpgen
