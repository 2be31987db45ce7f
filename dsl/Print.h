// Print: a Spec written back in the spec language, every default spelled
// out. Parsing and checking the output gives an equal Spec (round trip);
// this is what `fsdpgen check --dump` prints.
#pragma once

#include <string>

#include "dsl/Spec.h"

namespace fsdpgen {

std::string print_spec(const Spec& spec);

}  // namespace fsdpgen
