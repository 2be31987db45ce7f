// step (CUDA): the vocabulary's launchers and their kernels. Elementwise
// kernels take a thread per value; reductions one block in a fixed order, so
// that losses and norms are the same from run to run.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/grad_scaling.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/step.h"
#include "runtime/optimizer_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int kReduceThreads = 1024;
// narrow/widen in place: one block walks the values in chunks of this many.
constexpr int kChunkPerThread = 8;
constexpr int kChunk = kReduceThreads * kChunkPerThread;

// The step's loss sum: plus this micro-batch's losses, times loss_factor
// (1 but in --inject-spike's step).
__global__ void add_losses_kernel(gpu_step_scalars* s, const float* x, int64_t n) {
  block_add_sum(&s->loss_sum, x, n, &s->loss_factor);
}

__global__ void convert_kernel(void* dst, dtype_id dst_t, const void* src, dtype_id src_t,
                               int64_t n, bool accumulate) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  float v = load_as_float(src, src_t, i);
  if (accumulate) v += load_as_float(dst, dst_t, i);
  store_from_float(dst, dst_t, i, v);
}

// fp32 -> 16 bits (bf16 or fp16, H) in the first half of the same bytes.
// Chunk k reads floats [kC, (k+1)C) and writes 16-bit values into bytes that
// belong to floats below (k+1)C/2, all read by then: chunks in increasing
// order, read, barrier, write.
template <class H>
__global__ void narrow_in_place_kernel(void* data, int64_t n) {
  const float* f = static_cast<const float*>(data);
  H* h = static_cast<H*>(data);
  for (int64_t base = 0; base < n; base += kChunk) {
    float v[kChunkPerThread];
    for (int j = 0; j < kChunkPerThread; ++j) {
      const int64_t i = base + j * int64_t{blockDim.x} + threadIdx.x;
      v[j] = i < n ? f[i] : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < kChunkPerThread; ++j) {
      const int64_t i = base + j * int64_t{blockDim.x} + threadIdx.x;
      if (i < n) h[i] = from_float<H>(v[j]);
    }
    __syncthreads();
  }
}

// 16 bits -> fp32 over the same bytes: chunks in decreasing order (writes
// land on 16-bit values at or above the chunk, all read by then).
template <class H>
__global__ void widen_in_place_kernel(void* data, int64_t n) {
  float* f = static_cast<float*>(data);
  const H* h = static_cast<const H*>(data);
  for (int64_t base = (n - 1) / kChunk * kChunk; base >= 0; base -= kChunk) {
    float v[kChunkPerThread];
    for (int j = 0; j < kChunkPerThread; ++j) {
      const int64_t i = base + j * int64_t{blockDim.x} + threadIdx.x;
      v[j] = i < n ? to_float(h[i]) : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < kChunkPerThread; ++j) {
      const int64_t i = base + j * int64_t{blockDim.x} + threadIdx.x;
      if (i < n) f[i] = v[j];
    }
    __syncthreads();
  }
}

struct optimizer_args {
  float beta1, beta2, eps, weight_decay, momentum;
  double clip;
};

// Up to this many decay ranges ride in one optimizer launch's arguments
// (2 KiB); a unit with more takes a launch per group of them.
constexpr int kDecayRangesPerLaunch = 128;

// A launch's share [from, to) of a unit's shard and the decay ranges within it.
struct optimizer_span {
  int64_t from, to;
  int count;
  int64_t ranges[2 * kDecayRangesPerLaunch];  // [begin, end) pairs, increasing
};

// Whether weight decay applies at element i: inside the last range beginning at or before it.
__device__ bool decayed_at(const optimizer_span& s, int64_t i) {
  int lo = 0, hi = s.count;  // the first range beginning after i
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (s.ranges[2 * mid] <= i)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && i < s.ranges[2 * lo - 1];
}

// Where the updated master goes besides: the parameter shard in its dtype
// (a master copy's rounding), or nowhere (data null: fp32 params are the master).
struct param_copy {
  void* data;
  dtype_id dtype;
};

// One launch of a unit's optimizer step: AdamW (m, v the state) or SGD (m the
// momentum buffer, or null), a thread per element of the span, the update
// skipped when the gradient norm is not finite; then the master rounded
// into the parameter shard.
__global__ void optimizer_kernel(optimizer_kind kind, float* master, float* m, float* v,
                                 const void* grad, dtype_id gt, optimizer_span span,
                                 optimizer_args a, const gpu_step_scalars* s, param_copy param) {
  const int64_t i = span.from + blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= span.to) return;
  const grad_scaling gs = grad_scaling_of(s, a.clip);
  if (!gs.skip) {
    const bool decay = decayed_at(span, i);
    const float g = load_as_float(grad, gt, i) * gs.scale;
    if (kind == optimizer_kind::adamw)
      adamw_update(master[i], m[i], v[i], g, s->lr, a.beta1, a.beta2, 1.0f - powf(a.beta1, s->t),
                   1.0f - powf(a.beta2, s->t), a.eps, decay ? a.weight_decay : 0.0f);
    else
      sgd_update(master[i], m ? &m[i] : nullptr, g, s->lr, a.momentum,
                 decay ? a.weight_decay : 0.0f, s->t == 1.0f);
  }
  if (param.data) store_from_float(param.data, param.dtype, i, master[i]);
}

void check_launch() {
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void step_fill_inputs(step_context& c, int64_t mb, int32_t* tokens, int32_t* targets, gpu_exec& g) {
  const int64_t n = c.p->parallel.micro_batch * c.p->model.context;
  const int32_t* src = c.gpu->host_inputs + mb * 2 * n;
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  CUDA_CHECK(cudaMemcpyAsync(tokens, src, bytes, cudaMemcpyHostToDevice, g.stream));
  CUDA_CHECK(cudaMemcpyAsync(targets, src + n, bytes, cudaMemcpyHostToDevice, g.stream));
}

void step_add_losses(step_context& c, const float* losses, int64_t n, gpu_exec& g) {
  if (c.eval_losses)  // an evaluation pass: every position's loss to the pinned host buffer
    CUDA_CHECK(cudaMemcpyAsync(c.eval_losses, losses, static_cast<size_t>(n) * sizeof(float),
                               cudaMemcpyDeviceToHost, g.stream));
  n = step_counted_losses(c, n);  // a validation pass is issued eagerly, never captured
  add_losses_kernel<<<1, kReduceThreads, 0, g.stream>>>(g.scalars, losses, n);
  check_launch();
}

void tensor_convert(void* dst, dtype_id dst_t, const void* src, dtype_id src_t, int64_t n,
                    bool accumulate, gpu_exec& g) {
  if (n == 0) return;
  convert_kernel<<<grid_dim(ceil_div(n, kThreads)), kThreads, 0, g.stream>>>(dst, dst_t, src, src_t,
                                                                             n, accumulate);
  check_launch();
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, gpu_exec& g) {
  residual_forward(out, a, b, n, g.stream);
}
template void residual_forward<float>(float*, const float*, const float*, int64_t, gpu_exec&);
template void residual_forward<bf16>(bf16*, const bf16*, const bf16*, int64_t, gpu_exec&);
template void residual_forward<fp16>(fp16*, const fp16*, const fp16*, int64_t, gpu_exec&);

void tensor_zero(void* dst, int64_t bytes, gpu_exec& g) {
  CUDA_CHECK(cudaMemsetAsync(dst, 0, static_cast<size_t>(bytes), g.stream));
}

void tensor_narrow_in_place(void* data, int64_t n, dtype_id to, gpu_exec& g) {
  if (n == 0) return;
  if (to == dtype_id::fp16)
    narrow_in_place_kernel<__half><<<1, kReduceThreads, 0, g.stream>>>(data, n);
  else
    narrow_in_place_kernel<__nv_bfloat16><<<1, kReduceThreads, 0, g.stream>>>(data, n);
  check_launch();
}

void tensor_widen_in_place(void* data, int64_t n, dtype_id from, gpu_exec& g) {
  if (n == 0) return;
  if (from == dtype_id::fp16)
    widen_in_place_kernel<__half><<<1, kReduceThreads, 0, g.stream>>>(data, n);
  else
    widen_in_place_kernel<__nv_bfloat16><<<1, kReduceThreads, 0, g.stream>>>(data, n);
  check_launch();
}

void cuda_copy(void* dst, const void* src, int64_t bytes, gpu_exec& g) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, g.stream));
}

void step_add_grad_norm(step_context& c, const void* grad, dtype_id t, int64_t n, gpu_exec& g) {
  static_assert(kReduceScratchFloats >= kSumSquaresScratchFloats);
  if (n > 0) cuda_sum_squares(&g.scalars->norm_sq, g.norm_scratch, grad, t, n, g.stream);
}

void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, gpu_exec& g) {
  const program& p = *c.p;
  // muon(...): a unit without Muon matrices (the root) is all nested AdamW.
  if (p.train.optimizer.kind == optimizer_kind::muon)
    return step_optimizer(c, unit, param_shard, master, state, grad_shard, nullptr, g);
  const program_unit& u = p.units[unit];
  const int64_t n = u.shard_elems;
  float* w = master ? master : static_cast<float*>(param_shard);
  const optimizer_args a{static_cast<float>(p.train.optimizer.beta1),
                         static_cast<float>(p.train.optimizer.beta2),
                         static_cast<float>(p.train.optimizer.eps),
                         static_cast<float>(p.train.optimizer.weight_decay),
                         static_cast<float>(p.train.optimizer.momentum),
                         p.train.clip};
  const int64_t* ranges = c.gpu->decay_ranges[unit];
  const int count = c.gpu->decay_range_counts[unit];
  const param_copy param{master ? param_shard : nullptr, p.parallel.precision.param};
  float* m = state;
  float* v = p.train.optimizer.kind == optimizer_kind::adamw ? state + n : nullptr;
  if (p.train.optimizer.kind == optimizer_kind::sgd && p.train.optimizer.momentum <= 0) m = nullptr;
  // One launch per kDecayRangesPerLaunch ranges: launch k covers the shard from
  // the end of launch k - 1's last range to the end of its own (to n for the last).
  int64_t from = 0;
  for (int first = 0; first == 0 || first < count; first += kDecayRangesPerLaunch) {
    optimizer_span span{};
    span.from = from;
    span.count = std::min(count - first, kDecayRangesPerLaunch);
    for (int r = 0; r < span.count; ++r) {
      span.ranges[2 * r] = ranges[2 * (first + r)];
      span.ranges[2 * r + 1] = ranges[2 * (first + r) + 1];
    }
    span.to = first + span.count < count ? span.ranges[2 * span.count - 1] : n;
    from = span.to;
    if (span.to <= span.from) continue;
    optimizer_kernel<<<grid_dim(ceil_div(span.to - span.from, kThreads)), kThreads, 0, g.stream>>>(
        p.train.optimizer.kind, w, m, v, grad_shard, u.grad_shard_dtype, span, a, g.scalars, param);
    check_launch();
  }
}

void step_optimizer(step_context& c, int unit, void* param_shard, float* master, float* state,
                    const void* grad_shard, const float* muon_update, gpu_exec& g) {
  const program& p = *c.p;
  if (p.train.optimizer.kind != optimizer_kind::muon || c.gpu->muon_units == nullptr)
    throw std::runtime_error("unit " + std::string(p.units[unit].name) +
                             ": the optimizer step got Muon's updates, but the program's optimizer "
                             "is not muon or the CUDA set-up uploaded no Muon tables");
  const program_unit& u = p.units[unit];
  if (muon_update == nullptr && c.muon)
    for (const muon_shard_part& part : c.muon->units[static_cast<size_t>(unit)].parts)
      if (part.matrix >= 0)
        throw std::runtime_error("unit " + std::string(u.name) +
                                 ": its shard holds Muon matrices but the optimizer step got no "
                                 "updates for them");
  float* w = master ? master : static_cast<float*>(param_shard);
  cuda_muon_apply_shard(c.gpu->muon_units[unit], u.shard_elems, w, state, grad_shard,
                        u.grad_shard_dtype, muon_update, master ? param_shard : nullptr,
                        p.parallel.precision.param, gpu_muon_apply_args_of(p), g);
}

void step_reduce_loss(step_context&, const gpu_comm& comm, gpu_exec& g) {
  float* total = &g.scalars->loss_total;
  cuda_copy(total, &g.scalars->loss_sum, sizeof(float), g);
  comm_all_reduce(comm, total, total, 1, dtype_id::fp32, g);
}

void cuda_step_begin(gpu_context& gc, cudaStream_t stream) {
  constexpr size_t kInputs = offsetof(gpu_step_scalars, loss_sum);
  CUDA_CHECK(
      cudaMemcpyAsync(gc.exec.scalars, gc.host_scalars, kInputs, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemsetAsync(reinterpret_cast<char*>(gc.exec.scalars) + kInputs, 0,
                             sizeof(gpu_step_scalars) - kInputs, stream));
}

void cuda_step_end(gpu_context& gc, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(gc.host_scalars, gc.exec.scalars, sizeof(gpu_step_scalars),
                             cudaMemcpyDeviceToHost, stream));
}
