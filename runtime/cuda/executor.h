// executor (CUDA): the static schedule on CUDA streams. One host thread
// issues every op in the schedule's issue order onto its stream: first a
// cudaStreamWaitEvent for each dependency on another stream, then the op's
// launches, then a cudaEventRecord that later ops wait for. Every stream
// starts a step after the compute stream's step-begin event and the compute
// stream ends it after every other stream's last op, so steps never overlap
// (the same fork and join make the step capturable as one CUDA graph).
//
// Graphs: the step is issued eagerly for the first step (cuBLASLt chooses
// its algorithms, NCCL sets up its channels), captured during the second,
// and replayed from then on. Not captured (every step issued eagerly) when
// the comm layer runs in its MPI test mode (host-synchronous collectives),
// when --no-graph is given, or for the step being traced (its per-op timing
// events are recorded eagerly).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/arena.h"
#include "runtime/program.h"

struct step_context;
struct gpu_context;

struct gpu_executor {
  const program* p = nullptr;
  step_context* ctx = nullptr;
  gpu_context* gpu = nullptr;
  arena* mem = nullptr;  // lifetime accounting (the arena itself is device memory)
  cudaStream_t streams[kStreamCount] = {};
  bool stream_used[kStreamCount] = {};
  std::vector<cudaEvent_t> done;          // per op (no timing)
  std::vector<cudaEvent_t> start, end;    // per op (timing), for the traced step
  cudaEvent_t step_begin = nullptr;       // fork (no timing)
  cudaEvent_t step_zero = nullptr;        // timing origin of a traced step
  cudaEvent_t joined[kStreamCount] = {};  // join: each stream's last op of the step
  bool graphs = true;                     // may capture
  cudaGraphExec_t graph = nullptr;        // once captured
  std::vector<int64_t> start_ns, end_ns;  // per op, of the last timed step
};

// use_graphs: whether the step may be captured (see above).
void gpu_executor_start(gpu_executor& e, const program& p, step_context& ctx, gpu_context& gc,
                        arena& mem, bool use_graphs);
// Runs one step and waits for it; with `timed`, records per-op times into
// start_ns/end_ns (eagerly, never from a graph).
void gpu_executor_run_step(gpu_executor& e, int64_t step, bool timed);
void gpu_executor_stop(gpu_executor& e);
