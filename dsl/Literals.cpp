// Literals: reals and strings as the spec language reads them.
#include "dsl/Literals.h"

#include <fmt/format.h>

namespace fsdpgen {

std::string format_real(double x) {
  return fmt::format("{}", x);
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + "\"";
}

}  // namespace fsdpgen
