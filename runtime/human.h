// human: numbers as the runtime prints them for people: thousands separated
// by commas, bytes in MiB, counted words, runs of ranks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

// n and its word, plural where n is not 1: "1 node", "2 ranks".
inline std::string plural(int64_t n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

// Sorted, distinct ranks as runs of consecutive ones, each (first, last):
// {0, 1, 2, 5} is (0, 2), (5, 5). The messages that name ranks write them
// from these ("ranks 0-2 and 5").
template <class Rank>
std::vector<std::pair<Rank, Rank>> rank_runs(const std::vector<Rank>& ranks) {
  std::vector<std::pair<Rank, Rank>> runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    runs.emplace_back(ranks[i], ranks[j]);
    i = j + 1;
  }
  return runs;
}
