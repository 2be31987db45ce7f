// step: what a generated op function sees (step_context) and the small
// vocabulary those functions are written in besides the gpt2 kernels:
// arena pointers, inputs, collectives on the op's stream, gradient shard
// accumulation, the norm and the optimizer. Generated code calls only these,
// the kernels of runtime/gpt2.h and runtime/comm.h.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/comm.h"
#include "runtime/data.h"
#include "runtime/gemm.h"
#include "runtime/program.h"

struct gpu_context;  // runtime/cuda/step.h
struct muon_layout;  // runtime/muon_layout.h

struct step_context {
  const program* p = nullptr;
  std::byte* device = nullptr;  // arena bases
  std::byte* host = nullptr;
  comm_groups comms;
  const dataloader* data = nullptr;
  // The validation pass being run (-1: a training step). Its micro-batch 0
  // reads val's sequences from (pass * world + rank) * micro_batch on, and
  // only the first loss_rows of them count towards the loss (the last pass
  // may run past val_sequences).
  const dataloader* val = nullptr;
  int64_t validation_pass = -1;
  int64_t loss_rows = 0;
  int data_trace_fd = -1;  // --trace-data (a testing aid): where fills append their lines; -1: off
  gemm_workspace ws;
  int64_t step = 0;  // 0-based step being run
  // Global sequences before step 0's: step s reads from sequence_base + s *
  // world * micro_batches * micro_batch (non-zero when resumed from a
  // checkpoint written with another global batch).
  int64_t sequence_base = 0;
  double lr = 0;  // this step's learning rate
  // Set by the loop before each step (runtime/loss_scale.h):
  float dloss_scale = 0;        // grad_scale / tokens of the global batch
  float grad_scale = 1;         // reduced gradients = grad_scale x the average (fp16: S x post)
  int64_t optimizer_step = 1;   // 1-based count of applied updates, this one included
  double loss_sum = 0;          // this rank's per-token losses, this step
  float grad_norm_partial = 0;  // this rank's sum of squares (all-reduced over the shard group)
  // The loss-spike guard's limits for this step (runtime/guard.h; +inf: off),
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

// Fills micro-batch mb's tokens and targets (B*T int32 each) for this rank
// (in a validation pass, from the validation data).
void step_fill_inputs(step_context& c, int64_t mb, int32_t* tokens, int32_t* targets);
// Adds this micro-batch's per-token losses (N fp32) to the step's loss; in a
// validation pass, those of its first c.loss_rows sequences only.
void step_add_losses(step_context& c, const float* losses, int64_t n);

// dst (n, dst dtype) = src converted (accumulate: dst += src, in fp32).
void tensor_convert(void* dst, dtype_id dst_t, const void* src, dtype_id src_t, int64_t n,
                    bool accumulate);
void tensor_zero(void* dst, int64_t bytes);
// In place: n fp32 values -> n 16-bit values (bf16 or fp16) in the first
// half of the same bytes, and back (for reducing an fp32 accumulator in a
// 16-bit reduce dtype).
void tensor_narrow_in_place(void* data, int64_t n, dtype_id to);
void tensor_widen_in_place(void* data, int64_t n, dtype_id from);

// Adds the sum of squares of a gradient shard to c.grad_norm_partial. Once
// the partial sums are all-reduced over the shard group (replicas hold equal
// shards and count once), step_global_norm of it is the global norm.
void step_add_grad_norm(step_context& c, const void* grad, dtype_id t, int64_t n);

// The loss-spike guard's all-reduce: c.loss_total = this step's loss summed
// over every rank (comm: the world's), for the optimizer's gate.
void step_reduce_loss(step_context& c, MPI_Comm comm);

// The global gradient norm from the all-reduced sum of squares of gradients
// that hold grad_scale times the average; not finite when they overflowed
// (the optimizer then skips the step).
inline double step_global_norm(float norm_sq, float grad_scale) {
  return std::sqrt(static_cast<double>(norm_sq)) / grad_scale;
}

// The optimizer's gate: whether this step is left out (the global norm not
// finite, or over the loss-spike guard's limits, or the loss over its own),
// and otherwise the factor the gradients are read with (the clip factor over
// the loss scale). step_optimizer and Muon's step functions decide alike.
bool step_skips(const step_context& c, float& grad_scale);

// One unit's optimizer step on this rank's shard: reads the gradient shard
// (divided by c.grad_scale and clipped), updates master weights (fp32; the
// param shard itself when params are fp32) and optimizer state, and writes the
// param-dtype shard. Does nothing when the global norm is not finite (the
// step is skipped, as an fp16 overflow requires).
// optimizer = muon(...): muon_update holds, at the places of the unit's
// Muon matrices' slices in this shard, their orthogonalized updates
// (step_muon_scatter's), which the step applies to them; AdamW (the
// nested one's settings, its lr following the schedule in proportion)
// updates the rest, its m and v compacted in state (runtime/muon_layout.h).
void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, const float* muon_update = nullptr);

// optimizer = muon(...), one unit (runtime/muon_layout.h; the planner's
// MUON_GATHER, MUON_NS, MUON_SCATTER ops). Gather: each matrix's owner
// receives the slices of its reduced gradient that the other shards hold
// (comm: the shard group's), into gathered's gradient region, and copies
// its own. Orthogonalize: the owner's momentum step and Newton-Schulz
// (runtime/muon.h), from gathered (shard group > 1) or, when a rank holds
// every matrix whole, from the gradient shard with the updates written to
// update_shard; nothing when the step is skipped (the optimizer's gate).
// Scatter: each holder receives its slices of the owners' updates into
// update_shard.
void step_muon_gather(step_context& c, int unit, const void* grad_shard, void* gathered,
                      MPI_Comm comm);
void step_muon_orthogonalize(step_context& c, int unit, const void* grad_shard, void* gathered,
                             float* momentum, void* workspace, float* update_shard);
void step_muon_scatter(step_context& c, int unit, const void* gathered, float* update_shard,
                       MPI_Comm comm);

// The losses of a micro-batch that count: all n in a training step, the
// first loss_rows sequences' in a validation pass.
inline int64_t step_counted_losses(const step_context& c, int64_t n) {
  if (c.validation_pass < 0) return n;
  const int64_t counted = c.loss_rows * c.p->model.context;
  return counted < n ? counted : n;
}
