// step_context: what a generated op function sees, whichever the backend:
// the program, the arenas, the communicators, where its rows come from, and
// the step's changing values and outputs. The CPU's vocabulary over it is runtime/cpu/step.h,
// the GPU's runtime/cuda/step.h; the training loop, checkpoints and weights
// read only this.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "runtime/comm.h"
#include "runtime/gemm_workspace.h"
#include "runtime/program.h"

struct gpu_context;  // runtime/cuda/step.h
struct muon_layout;  // runtime/muon_layout.h
struct step_context;

// Where a step's rows come from: the training loop's data
// (runtime/train/training_data.h training_inputs). step_fill_inputs asks it
// for micro-batch mb's tokens and targets (B*T int32 each) of the training
// step or validation pass c is in.
struct step_inputs {
  virtual ~step_inputs() = default;
  virtual void fill(const step_context& c, int64_t mb, int32_t* tokens, int32_t* targets) const = 0;
};

struct step_context {
  const program* p = nullptr;
  std::byte* device = nullptr;  // arena bases
  std::byte* host = nullptr;
  comm_groups comms;
  const step_inputs* inputs = nullptr;  // set by the loop
  // The validation pass being run (-1: a training step). Its micro-batch 0
  // reads the validation data's sequences from (pass * world + rank) *
  // micro_batch on, and only the first loss_rows of them count towards the
  // loss (the last pass may run past val_sequences).
  int64_t validation_pass = -1;
  int64_t loss_rows = 0;
  // An evaluation pass (backend::run_eval), a validation pass on other rows:
  // micro-batch 0's tokens then targets (B*T int32 each, host), and where its
  // per-position losses go (B*T fp32, host); null outside one.
  const int32_t* eval_inputs = nullptr;
  float* eval_losses = nullptr;
  gemm_workspace ws;
  int64_t step = 0;  // 0-based step being run
  // Global sequences before step 0's: step s reads from sequence_base + s *
  // world * micro_batches * micro_batch (non-zero when resumed from a
  // checkpoint written with another global batch).
  int64_t sequence_base = 0;
  double lr = 0;  // this step's learning rate
  // Set by the loop before each step (runtime/train/loss_scale.h):
  float dloss_scale = 0;        // grad_scale / tokens of the global batch
  float grad_scale = 1;         // reduced gradients = grad_scale x the average (fp16: S x post)
  int64_t optimizer_step = 1;   // 1-based count of applied updates, this one included
  double loss_sum = 0;          // this rank's per-token losses, this step
  float grad_norm_partial = 0;  // this rank's sum of squares (all-reduced over the shard group)
  // The loss-spike guard's limits for this step (runtime/train/guard.h; +inf: off),
  // set by the loop, and the step's loss summed over every rank, in the step
  // (the guard's all-reduce; 0 without one).
  float norm_limit = std::numeric_limits<float>::infinity();
  float loss_total_limit = std::numeric_limits<float>::infinity();
  float loss_total = 0;
  // --inject-spike (a testing aid): this training step's losses count this
  // many times (1: as they are).
  float inject_loss_factor = 1;
  // Per unit: [begin, end) of this rank's shard that AdamW decays, as element
  // ranges (computed once at start from the tensor table).
  const int64_t* const* decay_ranges = nullptr;
  const int* decay_range_counts = nullptr;
  gpu_context* gpu = nullptr;  // the CUDA backend's state (null on the CPU)
  // optimizer = muon(...): this rank's matrices, exchanges and shard parts
  // (computed once at start; null otherwise).
  muon_layout* muon = nullptr;
};

template <class T>
inline T* dev(step_context& c, int64_t offset) {
  return reinterpret_cast<T*>(c.device + offset);
}
template <class T>
inline T* host(step_context& c, int64_t offset) {
  return reinterpret_cast<T*>(c.host + offset);
}

// A buffer of the plan, in the arena of its memory space.
template <class T>
inline T* step_buffer(step_context& c, int buffer) {
  const program_buffer& b = c.p->buffers[buffer];
  return reinterpret_cast<T*>((b.space == memory_space::device ? c.device : c.host) + b.offset);
}

inline MPI_Comm op_comm(step_context& c, stream_id s, comm_group g) {
  return c.comms.comm[static_cast<int>(s)][static_cast<int>(g)];
}

// The global gradient norm from the all-reduced sum of squares of gradients
// that hold grad_scale times the average; not finite when they overflowed
// (the optimizer then skips the step).
inline double step_global_norm(float norm_sq, float grad_scale) {
  return std::sqrt(static_cast<double>(norm_sq)) / grad_scale;
}

// The losses of a micro-batch that count: all n in a training step, the
// first loss_rows sequences' in a validation pass.
inline int64_t step_counted_losses(const step_context& c, int64_t n) {
  if (c.validation_pass < 0) return n;
  const int64_t counted = c.loss_rows * c.p->model.context;
  return counted < n ? counted : n;
}

// Fills micro-batch mb's tokens and targets (B*T int32 each, host memory)
// for this rank (in a validation pass, from the validation data; in an
// evaluation pass, its rows, untraced). The CPU step calls it as is; the
// CUDA backend fills its pinned inputs with it before the step.
inline void step_fill_inputs(step_context& c, int64_t mb, int32_t* tokens, int32_t* targets) {
  if (c.eval_inputs) {
    const size_t n = static_cast<size_t>(c.p->parallel.micro_batch * c.p->model.context);
    std::memcpy(tokens, c.eval_inputs, n * sizeof(int32_t));
    std::memcpy(targets, c.eval_inputs + n, n * sizeof(int32_t));
    return;
  }
  c.inputs->fill(c, mb, tokens, targets);
}
