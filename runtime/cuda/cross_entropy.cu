// cross_entropy (CUDA): the fused softmax cross-entropy and its gradient
// (launchers in kernels.cuh), a block per row (V is large), its logits read
// in 16-byte packs where aligned, optionally soft-capped (Gemma 2's).
#include <cstdint>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/kernels_shared.cuh"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"

namespace {

constexpr int kCrossEntropyThreads = 512;

// Whether the cross-entropy kernel reads rows of Vp logits in 16-byte packs:
// the first row and the row width aligned to them.
template <class T>
bool packed_logits(const T* logits, int64_t Vp) {
  return reinterpret_cast<uintptr_t>(logits) % 16 == 0 && Vp * sizeof(T) % 16 == 0;
}

// Softmax statistics of the values seen so far: their maximum and the sum of
// exp(x - max) (online softmax: the sum rescaled whenever the maximum grows).
struct softmax_stats {
  float max = -INFINITY;
  float sum = 0.0f;
};

__device__ inline softmax_stats softmax_add(softmax_stats s, float x) {
  if (x > s.max) return {x, s.sum * exp_clamped(s.max - x) + 1.0f};
  return {s.max, s.sum + exp_clamped(x - s.max)};
}

__device__ inline softmax_stats softmax_merge(softmax_stats a, softmax_stats b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {};
  return {m, a.sum * exp_clamped(a.max - m) + b.sum * exp_clamped(b.max - m)};
}

// Every thread gets the block's statistics merged: each warp's (butterfly),
// then the warps' in warp order. blockDim.x a multiple of 32, at most 1024.
__device__ inline softmax_stats block_softmax_stats(softmax_stats s) {
  __shared__ softmax_stats partial[kWarp];
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    s = softmax_merge(s, {__shfl_xor_sync(0xffffffffu, s.max, offset),
                          __shfl_xor_sync(0xffffffffu, s.sum, offset)});
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  s = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane] : softmax_stats{};
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    s = softmax_merge(s, {__shfl_xor_sync(0xffffffffu, s.max, offset),
                          __shfl_xor_sync(0xffffffffu, s.sum, offset)});
  return s;
}

// A logit as the softmax sees it: with a softcap X > 0, c = X tanh(x / X)
// rounded to D, as the CPU's cross_entropy_fused stores it in place before
// reading it back; else x.
template <class D>
__device__ inline float capped_logit(float x, float softcap) {
  return softcap > 0.0f ? to_float(from_float<D>(softcap_of(x, softcap))) : x;
}

// A block per row, reading its V true columns twice: once for the softmax
// statistics (online), once to write the gradient in place; the padded
// columns [V, Vp) are written zero. With `packed` (rows 16-byte aligned) each
// access is a 16-byte pack of columns. The scale is *dloss_scale_ptr when that
// is set, else dloss_scale. Each logit is capped (capped_logit) on both
// reads; its gradient is multiplied by softcap_slope of the capped value.
template <class D>
__global__ void cross_entropy_fused_kernel(D* logits, float* losses, const int32_t* targets,
                                           int64_t V, int64_t Vp, const float* dloss_scale_ptr,
                                           float dloss_scale, float softcap, bool packed) {
  using P = pack16<D>;
  if (dloss_scale_ptr != nullptr) dloss_scale = *dloss_scale_ptr;
  const int64_t n = blockIdx.x;
  D* x = logits + n * Vp;
  const int64_t target = targets[n];
  // Read before the reduction's barrier, so before any thread overwrites the row.
  const float target_logit =
      threadIdx.x == 0 ? capped_logit<D>(to_float(x[target]), softcap) : 0.0f;
  const int64_t width = packed ? P::kElems : 1;  // columns per access
  const int64_t stride = width * blockDim.x;
  softmax_stats st;
  for (int64_t v0 = threadIdx.x * width; v0 < V; v0 += stride) {
    if (!packed) {
      st = softmax_add(st, capped_logit<D>(to_float(x[v0]), softcap));
      continue;
    }
    const P p = *reinterpret_cast<const P*>(x + v0);
#pragma unroll
    for (int k = 0; k < P::kElems; k++)
      if (v0 + k < V) st = softmax_add(st, capped_logit<D>(to_float(p.v[k]), softcap));
  }
  st = block_softmax_stats(st);
  if (threadIdx.x == 0) losses[n] = logf(st.sum) + st.max - target_logit;
  const float inv = 1.0f / st.sum;
  const auto grad = [&](int64_t v, float xv) {
    if (v >= V) return from_float<D>(0.0f);
    const float c = capped_logit<D>(xv, softcap), prob = exp_clamped(c - st.max) * inv;
    const float slope = softcap_slope(c, softcap);
    return from_float<D>(dloss_scale * (prob - (v == target ? 1.0f : 0.0f)) * slope);
  };
  int64_t v0 = threadIdx.x * width;
  for (; v0 < V; v0 += stride) {
    if (!packed) {
      x[v0] = grad(v0, to_float(x[v0]));
      continue;
    }
    P p = *reinterpret_cast<const P*>(x + v0);
#pragma unroll
    for (int k = 0; k < P::kElems; k++)
      p.v[k] = grad(v0 + k, to_float(p.v[k]));
    *reinterpret_cast<P*>(x + v0) = p;
  }
  for (int64_t v = ceil_div(V, width) * width + threadIdx.x; v < Vp; v += blockDim.x)
    x[v] = from_float<D>(0.0f);
}

}  // namespace

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, float dloss_scale, float softcap, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_fused_kernel<<<grid_dim(N), kCrossEntropyThreads, 0, stream>>>(
      dev(logits), losses, targets, V, Vp, nullptr, dloss_scale, softcap,
      packed_logits(logits, Vp));
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, const float* dloss_scale, float softcap, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_fused_kernel<<<grid_dim(N), kCrossEntropyThreads, 0, stream>>>(
      dev(logits), losses, targets, V, Vp, dloss_scale, 0.0f, softcap, packed_logits(logits, Vp));
  CUDA_CHECK(cudaGetLastError());
}

#define CUDA_CROSS_ENTROPY_INSTANTIATE_T(T)                                                   \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t, \
                                       float, float, cudaStream_t);                           \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t, \
                                       const float*, float, cudaStream_t);

FSDPGEN_FOR_EACH_DTYPE(CUDA_CROSS_ENTROPY_INSTANTIATE_T)
