// GoogleTest parameter names from file names: every character that is not a
// letter or digit becomes '_'.
#pragma once

#include <cctype>
#include <string>

namespace fsdpgen::test {

inline std::string test_name_of(std::string s) {
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

}  // namespace fsdpgen::test
