// measure: how one entry is timed. A warm-up run, then timed runs until both
// the minimum run count and the minimum total time are met (at most
// kMaxRuns runs once the minimum count is met); the result is the mean.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

struct measure_options {
  int64_t min_runs = 3;       // per entry and round
  double min_seconds = 0.05;  // timed seconds per entry and round
  int64_t rounds = 5;         // passes over every entry (runtime/calibrate/sweep.h)
  // When set, the runs go on until it is true instead (another thread's work
  // is being timed beside them, runtime/calibrate/contention.h), and only the
  // runs that ended before it was are kept: none, when the first did not.
  const std::atomic<bool>* until = nullptr;
};

// Runs beyond which an entry stops even short of min_seconds.
inline constexpr int64_t kMaxRuns = 200;

struct measurement {
  double seconds = 0;  // mean of the timed runs
  int64_t runs = 0;
};

// `run` does one run and returns its seconds (it may do untimed preparation
// first, and a collective returns its group's slowest rank). The decision to
// stop reads only those seconds, so ranks that see the same seconds run the
// same number of times.
measurement measure(const measure_options& o, const std::function<double()>& run);

// The mean, not the median: a step's time is the sum of its ops', and the
// expected sum is the sum of the expected (mean) times; a median leaves out
// the slow runs that every step also has.
double mean_of(const std::vector<double>& xs);

// Seconds that f() takes on the steady clock.
template <class F>
double seconds_of(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
