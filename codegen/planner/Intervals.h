// Intervals: spans of a timeline, [start, end), as the cost model and
// `fsdpgen compare` measure busy and exposed time: the union of spans, its
// length, and the overlap of two unions.
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace fsdpgen {

using Intervals = std::vector<std::pair<double, double>>;

// Sorted, disjoint, non-empty.
inline Intervals merged(Intervals v) {
  std::erase_if(v, [](const auto& x) { return x.second <= x.first; });
  std::sort(v.begin(), v.end());
  Intervals out;
  for (const auto& x : v) {
    if (!out.empty() && x.first <= out.back().second)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

inline double length(const Intervals& v) {
  double sum = 0;
  for (const auto& [a, b] : v)
    sum += b - a;
  return sum;
}

// Length of the intersection of two merged interval lists.
inline double overlap(const Intervals& a, const Intervals& b) {
  double sum = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    sum += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second)
      ++i;
    else
      ++j;
  }
  return sum;
}

}  // namespace fsdpgen
