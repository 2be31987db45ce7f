// op_overhead: two threads pass a counter back and forth. Each waits as a
// stream worker waits for an event (runtime/cpu/streams.cpp's wait_for): a short
// spin on the atomic, then std::atomic::wait; each raises the other's counter
// and notifies, as run_op records an op's completion.
#include "runtime/calibrate/op_overhead.h"

#include <sys/prctl.h>

#include <atomic>
#include <cstdint>
#include <thread>

namespace {

constexpr int kSpins = 2000;  // runtime/cpu/streams.cpp's spin before a futex wait
constexpr int64_t kHandoffsPerRun = 100;

void wait_for(const std::atomic<int64_t>& flag, int64_t target) {
  int64_t v = flag.load(std::memory_order_acquire);
  for (int spin = 0; spin < kSpins && v < target; ++spin)
    v = flag.load(std::memory_order_acquire);
  while (v < target) {
    flag.wait(v, std::memory_order_acquire);
    v = flag.load(std::memory_order_acquire);
  }
}

void raise(std::atomic<int64_t>& flag, int64_t value) {
  flag.store(value, std::memory_order_release);
  flag.notify_all();
}

}  // namespace

measurement measure_op_overhead(const measure_options& o) {
  std::atomic<int64_t> ping{0}, pong{0};
  // The worker answers every ping until the ping reaches INT64_MAX.
  std::thread worker([&] {
    prctl(PR_SET_TIMERSLACK, 1000UL);
    for (int64_t i = 1;; ++i) {
      wait_for(ping, i);
      if (ping.load() == INT64_MAX) return;
      raise(pong, i);
    }
  });
  int64_t round = 0;
  const measurement m = measure(o, [&] {
    const double s = seconds_of([&] {
      for (int64_t k = 0; k < kHandoffsPerRun; ++k) {
        ++round;
        raise(ping, round);
        wait_for(pong, round);
      }
    });
    return s / static_cast<double>(2 * kHandoffsPerRun);
  });
  raise(ping, INT64_MAX);
  worker.join();
  return m;
}
