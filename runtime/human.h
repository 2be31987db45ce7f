// human: numbers as the runtime prints them for people: thousands separated
// by commas, bytes in MiB.
#pragma once

#include <cstdint>
#include <string>

inline std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

inline double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}
