// watch_status: where this process's streams are, for the training loop's
// watchdog (runtime/train/watchdog.h) to read. Each stream says which op it
// runs (relaxed atomic stores, nothing allocated): the CPU's streams
// (runtime/cpu/streams.h) and the CUDA host worker through watch_op_scope, the
// GPU's streams by writing marks into mapped pinned memory themselves
// (runtime/cuda/executor.h, watch_attach_gpu_marks). The backends write it;
// only the loop reads it.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "runtime/program.h"

// Where one stream of this process is: the op it runs (-1: none; between ops
// it may be waiting for deps) and when that op started (trace_clock_ns).
struct watch_stream_slot {
  std::atomic<int32_t> op{-1};
  std::atomic<int64_t> entered_ns{0};
};

// What the executor (runtime/cpu/streams.h) tells the monitor, and the
// --inject-stall testing aid it acts on.
struct watch_status {
  watch_stream_slot streams[kStreamCount];
  std::atomic<int64_t> step{-1};             // the 0-based training step last run
  std::atomic<int64_t> validation_pass{-1};  // >= 0 while a validation pass runs
  int64_t inject_stall_step = -1;            // this rank stalls its first compute op (CPU:
  double inject_stall_seconds = 0;           // sleeps in it; GPU: spins) of this step, this long
  // The CUDA executor's GPU-side marks (runtime/cuda/executor.h): per stream,
  // the op the GPU runs (-1: none), written by the GPU itself into mapped
  // pinned memory; null on the CPU and where the GPU cannot write them. Set
  // and read under gpu_marks_mutex (watch_attach_gpu_marks), so that the
  // monitor never reads them after the executor freed them.
  const volatile int32_t* gpu_marks = nullptr;
  // Raised by the executor before each run it issues (a step, a validation
  // pass): the same mark in another run is another instance of the op.
  std::atomic<int64_t> gpu_run{0};
  std::mutex gpu_marks_mutex;
};
watch_status& watch_process_status();

// Points the monitor at the GPU's marks (kStreamCount words), or, with null,
// withdraws them; once it returns the monitor no longer reads the old ones.
void watch_attach_gpu_marks(const volatile int32_t* marks);

inline void watch_enter(watch_stream_slot& s, int op, int64_t now_ns) {
  s.entered_ns.store(now_ns, std::memory_order_relaxed);
  s.op.store(op, std::memory_order_release);
}
inline void watch_leave(watch_stream_slot& s) {
  s.op.store(-1, std::memory_order_relaxed);
}
// While it lives, slot `s` names op `op` (an op some thread runs to its end
// or leaves by an exception).
class watch_op_scope {
 public:
  watch_op_scope(watch_stream_slot& s, int op, int64_t now_ns) : slot_(s) {
    watch_enter(slot_, op, now_ns);
  }
  ~watch_op_scope() { watch_leave(slot_); }
  watch_op_scope(const watch_op_scope&) = delete;
  watch_op_scope& operator=(const watch_op_scope&) = delete;

 private:
  watch_stream_slot& slot_;
};
