// measure: the warm-up, the stopping rule and the mean.
#include "runtime/calibrate/measure.h"

#include <algorithm>
#include <vector>

double mean_of(const std::vector<double>& xs) {
  double sum = 0;
  for (double x : xs)
    sum += x;
  return sum / static_cast<double>(xs.size());
}

measurement measure(const measure_options& o, const std::function<double()>& run) {
  run();  // warm-up: caches, page faults, OpenBLAS's and OpenMP's threads
  std::vector<double> seconds;
  if (o.until) {
    while (!o.until->load()) {
      const double s = run();
      if (!o.until->load()) seconds.push_back(s);
    }
    if (seconds.empty()) return {};
    return {mean_of(seconds), static_cast<int64_t>(seconds.size())};
  }
  double total_seconds = 0;
  const int64_t min_runs = std::max<int64_t>(o.min_runs, 1);
  while (static_cast<int64_t>(seconds.size()) < min_runs ||
         (total_seconds < o.min_seconds && static_cast<int64_t>(seconds.size()) < kMaxRuns)) {
    seconds.push_back(run());
    total_seconds += seconds.back();
  }
  return {mean_of(seconds), static_cast<int64_t>(seconds.size())};
}
