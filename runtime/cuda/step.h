// step (CUDA): the generated ops' vocabulary on the GPU, the counterpart of
// runtime/cpu/step.h. The same schedule is written with the same calls (the same
// names: overloads), each with the op's gpu_exec (`g`, its stream) as its
// last argument; what only a GPU has (cuda_copy, the device scalars, the NCCL
// communicator of op_comm) keeps a cuda_ name.
// Nothing here waits for the GPU or allocates: each call enqueues work on
// g.stream, so that a whole step can be captured once as a CUDA graph. The
// step's changing values (learning rate, step number, loss scale) and its
// outputs (loss sum, gradient norm) live in the device's gpu_step_scalars.
#pragma once

#include <cstdint>

#include "runtime/cuda/comm.h"
#include "runtime/cuda/exec.h"
#include "runtime/cuda/gpt2.h"
#include "runtime/cuda/muon.h"
#include "runtime/step_context.h"

// The GPU side of a step_context (step_context::gpu).
struct gpu_context {
  gpu_exec exec;
  gpu_comm_groups comms;
  gpu_step_scalars* host_scalars = nullptr;  // pinned mirror of exec.scalars
  int32_t* host_inputs = nullptr;  // pinned: tokens then targets of each micro-batch of the step
  // Per unit, this rank's AdamW decay ranges (as step_context::decay_ranges).
  const int64_t* const* decay_ranges = nullptr;
  const int* decay_range_counts = nullptr;
  // optimizer = muon(...): per unit, this rank's shard parts on the device
  // (runtime/cuda/muon.h, uploaded at set-up from step_context::muon).
  const gpu_muon_unit* muon_units = nullptr;
};

inline gpu_exec& gpu(step_context& c) {
  return c.gpu->exec;
}
inline const gpu_comm& cuda_op_comm(step_context& c, stream_id s, comm_group g) {
  return gpu_comm_of(c.gpu->comms, s, g);
}
// The device float that grad_norm ops add to and the norm's all-reduce sums.
inline float* cuda_norm_partial(step_context& c) {
  return &c.gpu->exec.scalars->norm_sq;
}
// The device float the loss gradient is scaled by (1 / tokens, times the loss scale).
inline const float* cuda_dloss_scale(step_context& c) {
  return &c.gpu->exec.scalars->dloss_scale;
}

// Copies micro-batch mb's tokens and targets (B*T int32 each, filled into the
// pinned host_inputs before the step) to the device.
void step_fill_inputs(step_context& c, int64_t mb, int32_t* tokens, int32_t* targets, gpu_exec& g);
// Adds n per-token losses (device fp32) to scalars->loss_sum; in an
// evaluation pass, copies all n to c.eval_losses (pinned host) too.
void step_add_losses(step_context& c, const float* losses, int64_t n, gpu_exec& g);

// As runtime/cpu/step.h's tensor_convert, tensor_zero, tensor_narrow_in_place and
// tensor_widen_in_place, on device memory.
void tensor_convert(void* dst, dtype_id dst_t, const void* src, dtype_id src_t, int64_t n,
                    bool accumulate, gpu_exec& g);
void tensor_zero(void* dst, int64_t bytes, gpu_exec& g);
void tensor_narrow_in_place(void* data, int64_t n, dtype_id to, gpu_exec& g);
void tensor_widen_in_place(void* data, int64_t n, dtype_id from, gpu_exec& g);
// Device-to-device, host-to-device or device-to-host copy on g.stream.
void cuda_copy(void* dst, const void* src, int64_t bytes, gpu_exec& g);
// out = a + b over n values (out may alias a or b): the residual add the
// step does after a custom layer, as runtime/cpu/kernels.h's on the CPU.
template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, gpu_exec& g);

// Adds the sum of squares of a gradient shard to scalars->norm_sq.
void step_add_grad_norm(step_context& c, const void* grad, dtype_id t, int64_t n, gpu_exec& g);

// As step_reduce_loss: scalars->loss_total = the step's loss summed over
// every rank (comm: the world's).
void step_reduce_loss(step_context& c, const gpu_comm& comm, gpu_exec& g);

// One unit's optimizer step on this rank's shard, as step_optimizer: the
// learning rate, step number and clip factor come from the device scalars;
// the step is skipped (nothing changes) when the gradient norm is not finite.
void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, gpu_exec& g);

// optimizer = muon(...): as runtime/cpu/step.h's step_optimizer with muon_update
// (Muon's updates on the unit's matrices' slices, the nested AdamW on the
// rest), from c.gpu->muon_units and the device scalars. The call without
// muon_update above takes this path too under muon(...) (a unit without
// matrices, whose shard is all AdamW's).
void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, const float* muon_update, gpu_exec& g);

// optimizer = muon(...), one unit, as runtime/cpu/step.h's step_muon_*, on the
// device (runtime/cuda/muon_step.cpp). Gather and scatter: NCCL
// point-to-point in one group per op (ncclSend and ncclRecv per slice),
// the owner's own slices copied device to device, all on g.stream; the
// test mode (mpi_test) stages them through the communicator's pinned host
// memory, waiting. Orthogonalize: cuda_muon_orthogonalize per owned matrix.
void step_muon_gather(step_context& c, int unit, const void* grad_shard, void* gathered,
                      const gpu_comm& comm, gpu_exec& g);
void step_muon_orthogonalize(step_context& c, int unit, const void* grad_shard, void* gathered,
                             float* momentum, void* workspace, float* update_shard, gpu_exec& g);
void step_muon_scatter(step_context& c, int unit, const void* gathered, float* update_shard,
                       const gpu_comm& comm, gpu_exec& g);

// Zeroes the step's outputs and uploads its inputs (first on the compute
// stream), and downloads the outputs (last), both on `stream`.
void cuda_step_begin(gpu_context& gc, cudaStream_t stream);
void cuda_step_end(gpu_context& gc, cudaStream_t stream);
