// contention: the calls on a worker thread, the passes on this one, until
// the calls end; only the passes that ended while calls ran are kept.
#include "runtime/calibrate/contention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "runtime/calibrate/collectives.h"
#include "runtime/calibrate/ranks.h"

namespace {

// Attempts, each with the calls the last one says last long enough. On a
// loaded machine a call's time swings between attempts: 5 once ended with
// 2,557 calls over 0.014 s, one pass's time, after slower attempts
// (CliTune, 2026-11-28, beside a build); each failed attempt at least
// doubles the calls.
constexpr int kAttempts = 8;
constexpr int64_t kMaxCalls = int64_t{1} << 20;

}  // namespace

contention_measurement measure_contention(const fsdpgen::profile::ContentionTime& e, MPI_Comm group,
                                          calibrate_target& t, const measure_options& o) {
  // The calls should last several layer passes: a pass alone, once, and a
  // few calls beside the passes first, which say how long one call takes there.
  const double layer_s = ranks_max(t.layer(e.layer, {1, 0, 1, nullptr}).seconds, group);
  // The passes' set-up (buffers, a warm-up; a backward's forward) runs
  // beside the calls too: about 3 passes' time before the first timed one.
  const double want_s = std::max(o.min_seconds, 6 * layer_s);
  collective_call call(e.collective, group);
  int64_t calls = 3;
  for (int attempt = 1;; ++attempt) {
    std::atomic<bool> done{false};
    double calls_s = 0;
    measurement layer;
    ranks_barrier(group);
    ranks_all_or_none(group, [&] {
      std::exception_ptr call_error;
      std::thread worker([&] {
        try {
          calls_s = seconds_of([&] {
            for (int64_t i = 0; i < calls; ++i)
              call.run();
          });
        } catch (...) {
          call_error = std::current_exception();
        }
        done = true;
      });
      measure_options until = o;
      until.until = &done;
      try {
        layer = t.layer(e.layer, until);
      } catch (...) {
        worker.join();  // its peers' calls end (theirs wait for this rank's)
        throw;
      }
      worker.join();
      if (call_error) std::rethrow_exception(call_error);
    });
    const int64_t kept = ranks_min(layer.runs, group);
    calls_s = ranks_max(calls_s, group);
    if ((kept >= 2 && calls_s >= want_s / 2) || (kept >= 1 && attempt == kAttempts))
      return {{calls_s / static_cast<double>(calls), calls},
              {ranks_max(layer.seconds, group), kept}};
    if (attempt == kAttempts || calls == kMaxCalls)
      throw std::runtime_error(fmt::format(
          "no layer pass ended while {} calls ran ({:.3f} s; a pass alone takes {:.3f} s)", calls,
          calls_s, layer_s));
    // Long enough, or twice as long when they were and too few passes ended.
    const double scale = std::max(want_s / std::max(calls_s, 1e-6), kept < 2 ? 2.0 : 1.0);
    calls = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(calls * scale * 1.1)), calls + 1,
                                kMaxCalls);
  }
}
