// measure: the warm-up, the stopping rule and the median.
#include "calibrate/measure.h"

#include <algorithm>
#include <vector>

namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

}  // namespace

measurement measure(const measure_options& o, const std::function<double()>& run) {
  run();  // warm-up: caches, page faults, OpenBLAS's and OpenMP's threads
  std::vector<double> seconds;
  double total_seconds = 0;
  const int64_t min_runs = std::max<int64_t>(o.min_runs, 1);
  while (static_cast<int64_t>(seconds.size()) < min_runs ||
         (total_seconds < o.min_seconds && static_cast<int64_t>(seconds.size()) < kMaxRuns)) {
    seconds.push_back(run());
    total_seconds += seconds.back();
  }
  return {median(seconds), static_cast<int64_t>(seconds.size())};
}
