// Literals: values written back as the spec language reads them, for the
// printer, the key tables and the messages that quote a value.
#pragma once

#include <string>

namespace fsdpgen {

// Shortest text that reads back as exactly `x` (1e-08, 0.95, 3).
std::string format_real(double x);

// `s` as a spec-language string literal: "a \"b\".txt".
std::string quote(const std::string& s);

}  // namespace fsdpgen
