// Edit-distance suggestions.
#include "runtime/suggest/suggest.h"

#include <algorithm>

namespace fsdpgen {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and
// transpositions of adjacent bytes each cost 1, so 'wrold' is 1 from 'world'.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev2(b.size() + 1), prev(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j)
    prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      row[j] =
          std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        row[j] = std::min(row[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, row);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest_match(std::string_view word, const std::vector<std::string_view>& candidates) {
  if (word.empty() || word.size() > 64) return {};
  size_t limit = std::max<size_t>(1, word.size() / 3);
  size_t best = limit + 1;
  std::string_view best_word;
  for (std::string_view c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best) best = d, best_word = c;
  }
  return std::string(best_word);
}

std::string quoted_choices(const std::vector<std::string_view>& candidates,
                           std::string_view last_sep) {
  std::string out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (i > 0) out += (i + 1 == candidates.size()) ? std::string(last_sep) : ", ";
    out += "'" + std::string(candidates[i]) + "'";
  }
  return out;
}

}  // namespace fsdpgen
