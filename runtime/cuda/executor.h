// executor (CUDA): the static schedule on CUDA streams. One host thread
// issues every op in the schedule's issue order onto its stream: first a
// cudaStreamWaitEvent for each dependency on another stream, then the op's
// launches, then a cudaEventRecord that later ops wait for. Every stream
// starts a step after the compute stream's step-begin event and the compute
// stream ends it after every other stream's last op, so steps never overlap
// (the same fork and join make the step capturable as one CUDA graph).
//
// Offload: the ops the program runs on the host (program::host_ops: the
// norm, the optimizer, collectives of host memory) are handed, at their place
// in the issue order, to a host worker (runtime/cuda/host_worker.h) that waits
// for their GPU dependencies' events and runs them in order. No GPU op may
// depend on a host op (checked at start): the GPU never waits for the host,
// and a step ends when the GPU and the host worker are both done.
//
// Graphs: the step is issued eagerly for the first step (cuBLASLt chooses
// its algorithms, NCCL sets up its channels), captured during the second,
// and replayed from then on. Not captured (every step issued eagerly) when
// the comm layer runs in its MPI test mode (host-synchronous collectives),
// when the program runs ops on the host (a graph replays device work only:
// the hand-overs to the host worker, and the events it waits for, happen as
// the issuing thread issues), when --no-graph is given, or for the step being
// traced (its per-op timing events are recorded eagerly).
//
// Watchdog marks (runtime/watch_status.h): each stream writes, by stream memory
// operations (cuStreamWriteValue32: no kernel, captured into the graph as
// memory-operation nodes), an op's index into its word of a small mapped
// pinned buffer when it reaches the op (after the op's dependency waits) and
// -1 when the op's work is done; the monitor reads the words. Where the GPU
// cannot (a note at start says why) or FSDPGEN_GPU_MARKS=0, only the host's
// side is marked. The collectives the issuing thread runs host-synchronously
// (the MPI test mode) are marked on the host instead, as a CPU stream marks
// them: the host first waits for their dependencies, unmarked. With
// --inject-stall, the stalled step is issued eagerly with a spin kernel
// (runtime/cuda/spin.h) before its first compute op, after that op's mark.
//
// Trace times: GPU ops from CUDA events after the step's start event; host
// ops from the host clock after the moment that event completed (a traced
// step waits for it before issuing on), so both share one origin to within
// microseconds.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "runtime/arena.h"
#include "runtime/cuda/host_worker.h"
#include "runtime/program.h"

struct step_context;
struct gpu_context;

struct gpu_executor {
  const program* p = nullptr;
  step_context* ctx = nullptr;
  gpu_context* gpu = nullptr;
  cudaStream_t streams[kStreamCount] = {};
  bool stream_used[kStreamCount] = {};    // by an op that runs on the GPU
  std::vector<char> on_host;              // per op: runs on the host (program::host_ops)
  host_worker host;                       // runs them (not started when there are none)
  std::vector<cudaEvent_t> done;          // per op (no timing)
  std::vector<cudaEvent_t> start, end;    // per op (timing), for the traced step
  cudaEvent_t step_begin = nullptr;       // fork (no timing)
  cudaEvent_t step_zero = nullptr;        // timing origin of a traced step
  cudaEvent_t joined[kStreamCount] = {};  // join: each stream's last op of the step
  bool graphs = true;                     // may capture
  cudaGraphExec_t graph = nullptr;        // once captured
  std::vector<int64_t> start_ns, end_ns;  // per op, of the last timed step
  std::vector<char> host_sync;            // per op: a collective run host-synchronously (mpi-test)
  int stall_op = -1;                      // the compute stream's first op on the GPU
  // The watchdog's marks: kStreamCount words (null: not written by the GPU),
  // their device address, and the driver's cuStreamWriteValue32.
  int32_t* marks = nullptr;
  CUdeviceptr marks_device = 0;
  PFN_cuStreamWriteValue32_v11070 write_value = nullptr;
};

// use_graphs: whether the step may be captured (the caller decides, by the
// rules above: never for a program with host ops). Throws when a
// GPU op depends on a host op, or a communicator would serve both. Sets up
// the watchdog's marks (see above) and hands them to the monitor.
void gpu_executor_start(gpu_executor& e, const program& p, step_context& ctx, gpu_context& gc,
                        bool use_graphs);
// Runs one step and waits for it (the GPU and the host worker); with
// `timed`, records per-op times into start_ns/end_ns (eagerly, never from a
// graph).
void gpu_executor_run_step(gpu_executor& e, int64_t step, bool timed);
// Issues ops 0 .. op_count-1 (a prefix with no host op, such as the
// validation pass) eagerly, untimed, and waits for them.
void gpu_executor_run_prefix(gpu_executor& e, int op_count);
// Withdraws the marks from the monitor, stops the host worker and frees the
// streams, events and marks. Returns false when
// the host worker could not be stopped (see host_worker_stop; only after a
// failure, with several ranks): the host memory its ops use must then stay
// allocated.
bool gpu_executor_stop(gpu_executor& e);
