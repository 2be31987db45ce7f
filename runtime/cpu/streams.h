// streams: the CPU form of CUDA streams and events. The compute stream runs
// on the calling thread; every other stream the program uses gets a worker
// thread that runs its ops in issue order. An op first waits for its deps
// (events are per-op completion counters holding the last step that op
// finished), then runs, then records its event. A failure on any stream stops
// every stream and is rethrown by streams_run_step. A program built with red
// zones (runtime/cpu/red_zones.h) runs every op on the calling thread, checked.
// Each stream tells the watchdog (runtime/watch_status.h) which op it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/program.h"
#include "runtime/watch_status.h"

struct stream_executor {
  const program* p = nullptr;
  step_context* ctx = nullptr;
  std::vector<int> ops_of[kStreamCount];         // op ids per stream, issue order
  std::unique_ptr<std::atomic<int64_t>[]> done;  // per op: last step finished
  // The run the workers may run and its op count, in one word (run <<
  // kStreamsLimitBits | op count), so that a worker never pairs a run with
  // another run's count.
  std::atomic<int64_t> go{-1};
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  std::vector<std::thread> workers;
  int64_t step_start_ns = 0;
  std::vector<int64_t> start_ns, end_ns;  // per op, this step, from step start
  watch_status* watch = nullptr;          // the process's (watch_process_status)
  bool stall_first_op = false;            // --inject-stall: this step's first compute op sleeps
};

inline constexpr int kStreamsLimitBits = 24;  // a program has fewer than 2^24 ops

void streams_start(stream_executor& e, const program& p, step_context& ctx);
// Runs ops 0 .. op_count-1 of the step (-1: every op; a prefix closed under
// deps, such as the validation pass) as run number `step`, which increases
// from call to call; returns when all streams finished them.
void streams_run_step(stream_executor& e, int64_t step, int op_count = -1);
void streams_stop(stream_executor& e);

// The wait between ops (public for its test, tests/runtime/StreamsTest.cpp):
// returns the value of `flag` once it is >= target, after a short spin, a few
// yields and then futex waits each bounded (50 ms), so that a store whose
// wake-up is lost is seen within one bound, never a hang.
int64_t streams_wait_until(const std::atomic<int64_t>& flag, int64_t target);
