// step: the small vocabulary generated op functions are written in on the
// CPU besides the gpt2 kernels, over what they see (step_context,
// runtime/step_context.h): inputs, collectives on the op's stream, gradient
// shard accumulation, the norm and the optimizer. Generated code calls only
// these, the kernels of runtime/cpu/gpt2.h and runtime/comm.h.
#pragma once

#include <cstdint>

#include "runtime/step_context.h"

// Adds this micro-batch's per-token losses (N fp32) to the step's loss; in a
// validation pass, those of its first c.loss_rows sequences only; in an
// evaluation pass, copies all N to c.eval_losses too.
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
// (runtime/cpu/muon.h), from gathered (shard group > 1) or, when a rank holds
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
