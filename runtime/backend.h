// backend: what the training loop (runtime/train/train.cpp) asks of the machine a
// step runs on. The loop (flags, data, logging, metrics, weights files,
// traces) is the same for every target; a backend owns the arena, runs the
// planned step and reports what it measured. The CPU backend is
// runtime/cpu/backend.cpp, the CUDA one runtime/cuda/backend.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/optimizer_math.h"
#include "runtime/program.h"
#include "runtime/step_context.h"

// Flags only some backends read.
struct backend_options {
  std::string comm = "nccl";      // CUDA: nccl, or mpi-test (ranks sharing one GPU)
  bool graphs = true;             // CUDA: capture the step as a CUDA graph
  int64_t profile_step = -1;      // CUDA: the 0-based step bracketed by cudaProfilerStart/Stop
                                  // (for `ncu --profile-from-start off`); -1: none
  int64_t arena_extra_bytes = 0;  // CPU: --inject-arena-bytes (a testing aid): the arena this
                                  // much larger than planned
};

// A memory_reading figure nothing measured.
inline constexpr int64_t kNotMeasuredBytes = std::numeric_limits<int64_t>::min();

// This process's memory as the machine counts it now (the kernel,
// runtime/machine_memory.h; on a GPU, its driver), not as the plan adds it
// up: what a run reports beside the plan.
struct memory_reading {
  int64_t host_resident_bytes = 0;   // the process's resident set
  int64_t host_anonymous_bytes = 0;  // the part of it no file backs (heap, stacks, arenas), which
                                     // mapped token files and shared memory do not grow
  int64_t arena_resident_bytes = 0;  // resident pages of the arenas in host memory (CPU: both
                                     // arenas; GPU: the pinned host arena of offload)
  int64_t arena_growth_bytes = 0;    // how much the process grew when those arenas were
                                     // allocated and touched (exact; CPU: its anonymous memory,
                                     // GPU: its resident set)
  int64_t device_used_bytes = -1;    // GPU: memory in use on the device per its driver (every
                                     // process's); -1 on a CPU
  int64_t device_arena_bytes = -1;   // GPU: how much the driver's count grew when the arena was
                                     // allocated; -1 on a CPU
  // CPU: anonymous memory (heap, thread stacks, library buffers) the process
  // gained from the backend's creation to the start of its first pass, less
  // the arenas' resident pages (below 0 if set-up freed more than it took);
  // kNotMeasuredBytes before that, and on a GPU.
  int64_t set_up_beside_arena_bytes = kNotMeasuredBytes;
};

struct step_result {
  double loss_sum = 0;   // this rank's per-token losses
  double grad_norm = 0;  // global gradient norm (before clipping)
  bool skipped = false;  // the optimizer skipped the step (optimizer_skips)
  bool spike = false;    // ...because the loss-spike guard tripped (finite gradients)
};

// A step's result from this rank's loss sum, the all-reduced sum of squares
// of its gradients (step_global_norm), and what the optimizer's gate saw:
// the step's loss over every rank and the guard's limits (c's).
inline step_result step_result_of(double loss_sum, float norm_sq, const step_context& c,
                                  float loss_total) {
  const double norm = step_global_norm(norm_sq, c.grad_scale);
  const bool skipped = optimizer_skips(norm, loss_total, c.norm_limit, c.loss_total_limit);
  return {loss_sum, norm, skipped, skipped && std::isfinite(norm)};
}

class backend {
 public:
  virtual ~backend() = default;
  // Allocates the arena (mem) and sets up streams and communicators; c has
  // the program, the CPU communicators, the data and the decay ranges.
  virtual void start(step_context& c, arena& mem, const backend_options& o) = 0;
  // One line for the header ("2 threads per rank", "NVIDIA H100 ..., NCCL, CUDA graphs").
  virtual std::string describe() const = 0;
  // Runs fn with this rank's persistent buffers in host memory behind
  // c.device (the CPU arena itself; a host copy of them on a GPU), copied back
  // to the device afterwards when write_back.
  virtual void with_host_weights(step_context& c, bool write_back,
                                 const std::function<void()>& fn) = 0;
  // Copies persistent buffer `buffer`, all of it, into host memory at `to`,
  // between steps (a checkpoint's staging copy: runtime/train/checkpoint.h).
  virtual void copy_to_host(step_context& c, int buffer, std::byte* to) = 0;
  // Runs training step `step` (0-based; a resumed run starts above 0) at
  // learning rate lr; with timed, records per-op times.
  virtual step_result run_step(int64_t step, double lr, bool timed) = 0;
  // Runs validation pass `pass` (the plan's validation_op_count first ops:
  // gathers and micro-batch 0's forward) on val's sequences, of which this
  // rank's first `rows` count; returns their per-token losses summed.
  virtual double run_validation(int64_t pass, int64_t rows) = 0;
  // Runs an evaluation pass (runtime/train/training_eval.cpp): the validation
  // pass with micro-batch 0's tokens and targets taken from `inputs` (B*T
  // int32 each, tokens then targets) instead of val's; writes its
  // per-position losses (B*T fp32) to `losses`.
  virtual void run_eval(const int32_t* inputs, float* losses) = 0;
  // Per op, from the start of the last timed step (ns).
  virtual const std::vector<int64_t>& op_start_ns() const = 0;
  virtual const std::vector<int64_t>& op_end_ns() const = 0;
  // Steps at the start of a run whose host allocations are expected (not counted):
  // GEMM algorithm choice, graph capture.
  virtual int64_t warmup_steps() const = 0;
  // What the machine counts now (allocates nothing).
  virtual memory_reading read_memory() const = 0;
  virtual void stop() = 0;
};

struct backend_kind {
  const char* name;  // "cpu", "cuda"
  bool cuda_flags;   // accepts --comm and --no-graph
  std::unique_ptr<backend> (*make)(const program& p);
};

std::unique_ptr<backend> make_cpu_backend(const program& p);
inline constexpr backend_kind kCpuBackend{"cpu", false, &make_cpu_backend};

// The generated main() calls this (train_main(p, argc, argv) is the CPU one).
int train_main(const program& p, int argc, char** argv, const backend_kind& kind);
