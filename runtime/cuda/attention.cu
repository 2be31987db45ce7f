// attention (CUDA): the causal softmax kernels and the strided-batched GEMMs
// of cuda_attention_forward/backward (see attention.h); the flash kernels
// are in attention_flash.cu.
//
// Each GEMM runs once per head h, batched over the B sequences: for sequence
// b, head h's q, k, v (T, hs) start at qkv + b*T*3C + h*hs with leading dim
// 3C, its out/dout (T, hs) at b*T*C + h*hs with leading dim C, its P (T, T)
// at probs + (b*H + h)*T*T. The stride between sequences is uniform per
// tensor (T*3C, T*C, H*T*T) and each batch item of an output occupies its own
// memory range, which batching over heads (stride hs, items interleaved
// within rows) would not give.
//
// The products run over full (T, T) matrices: the scores above the diagonal
// are computed and then overwritten by the softmax's zeros, and the zeros of
// P and dS contribute nothing to the products that read them.
#include "runtime/cuda/attention.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/gemm.h"
#include "runtime/dtype_pairs.h"

namespace {

constexpr int kRowsPerBlock = 8;  // a warp per (T)-row

// ---------------------------------------------------------------- softmax kernels

// Row r of the (B*H*T, T) scores in place: columns [0, t] (t = r mod T, the
// query's position) become their softmax, computed in fp32; the rest zeros.
// Each lane reads and then writes only its own columns, after the warp's
// reductions, so the in-place update does not race.
template <class DT>
__global__ void softmax_causal_kernel(DT* probs, int64_t rows, int64_t T_) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= rows) return;  // the whole warp: the shuffles below see all 32 lanes
  DT* row = probs + r * T_;
  const int64_t t = r % T_;
  float maxv = -INFINITY;
  for (int64_t u = lane; u <= t; u += kWarp)
    maxv = fmaxf(maxv, to_float(row[u]));
  maxv = warp_reduce(maxv, max_op{});  // finite: column 0 is always visible
  float sum = 0.0f;
  for (int64_t u = lane; u <= t; u += kWarp)
    sum += expf(to_float(row[u]) - maxv);
  const float inv = 1.0f / warp_reduce(sum, sum_op{});
  for (int64_t u = lane; u < T_; u += kWarp)
    row[u] = from_float<DT>(u <= t ? expf(to_float(row[u]) - maxv) * inv : 0.0f);
}

// Row r of dP in place: dS[u] = scale * P[u] (dP[u] - sum over u' <= t of
// P[u'] dP[u']) for u <= t, zeros after (the scale folds in the scores').
template <class DT>
__global__ void softmax_causal_backward_kernel(DT* dprobs, const DT* probs, int64_t rows,
                                               int64_t T_, float scale) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (r >= rows) return;
  DT* ds = dprobs + r * T_;
  const DT* p = probs + r * T_;
  const int64_t t = r % T_;
  float dot = 0.0f;
  for (int64_t u = lane; u <= t; u += kWarp)
    dot += to_float(p[u]) * to_float(ds[u]);
  dot = warp_reduce(dot, sum_op{});
  for (int64_t u = lane; u < T_; u += kWarp)
    ds[u] = from_float<DT>(u <= t ? scale * to_float(p[u]) * (to_float(ds[u]) - dot) : 0.0f);
}

// ---------------------------------------------------------------- head walk

// Strides of the head walk, in elements: head h of sequence b starts at
// b * *_seq + h * head_col (q, k, v, out) or h * probs_head (probs).
struct head_layout {
  int64_t hs, C3;
  int64_t qkv_seq, out_seq, probs_seq;  // between sequences
  int64_t head_col;                     // between heads in a row of q, k, v, out (hs)
  int64_t probs_head;                   // between heads' (T, T) matrices in probs (T * T)
};

head_layout head_layout_of(int64_t T_, int64_t C, int64_t H) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument("attention: C=" + std::to_string(C) +
                                " is not a multiple of H=" + std::to_string(H));
  const int64_t hs = C / H;
  return head_layout{hs, 3 * C, T_ * 3 * C, T_ * C, H * T_ * T_, hs, T_ * T_};
}

// A GEMM batched over the B sequences with the given strides.
template <class TC>
cuda_gemm_extras<TC> over_sequences(int64_t B, int64_t stride_a, int64_t stride_b,
                                    int64_t stride_c) {
  cuda_gemm_extras<TC> e;
  e.batch = B;
  e.stride_a = stride_a;
  e.stride_b = stride_b;
  e.stride_c = stride_c;
  return e;
}

}  // namespace

template <class T>
void cuda_attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t C,
                            int64_t H, gpu_exec& g) {
  const head_layout L = head_layout_of(T_, C, H);
  if (B * T_ == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(L.hs));
  // Scores: P[b, h] = scale * q k^T, (T, T).
  for (int64_t h = 0; h < H; h++) {
    const T* q = qkv + h * L.head_col;
    const T* k = q + C;
    cuda_gemm(false, true, T_, T_, L.hs, scale, q, L.C3, k, L.C3, 0.0f, probs + h * L.probs_head,
              T_, g, over_sequences<T>(B, L.qkv_seq, L.qkv_seq, L.probs_seq));
  }
  const int64_t rows = B * H * T_;
  softmax_causal_kernel<<<grid_dim(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarp, 0,
                          g.stream>>>(dev(probs), rows, T_);
  CUDA_CHECK(cudaGetLastError());
  // out[b, :, h] = P[b, h] v, (T, hs) with leading dim C.
  for (int64_t h = 0; h < H; h++) {
    const T* v = qkv + h * L.head_col + 2 * C;
    cuda_gemm(false, false, T_, L.hs, T_, 1.0f, probs + h * L.probs_head, T_, v, L.C3, 0.0f,
              out + h * L.head_col, C, g, over_sequences<T>(B, L.probs_seq, L.qkv_seq, L.out_seq));
  }
}

template <class T>
void cuda_attention_backward(T* dqkv, T* dprobs, const T* dout, const T* qkv, const T* probs,
                             int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g) {
  const head_layout L = head_layout_of(T_, C, H);
  if (B * T_ == 0) return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(L.hs));
  // dP = dout v^T, (T, T), into dprobs.
  for (int64_t h = 0; h < H; h++) {
    const T* v = qkv + h * L.head_col + 2 * C;
    cuda_gemm(false, true, T_, T_, L.hs, 1.0f, dout + h * L.head_col, C, v, L.C3, 0.0f,
              dprobs + h * L.probs_head, T_, g,
              over_sequences<T>(B, L.out_seq, L.qkv_seq, L.probs_seq));
  }
  const int64_t rows = B * H * T_;
  softmax_causal_backward_kernel<<<grid_dim(ceil_div(rows, kRowsPerBlock)), kRowsPerBlock * kWarp,
                                   0, g.stream>>>(dev(dprobs), dev(probs), rows, T_, scale);
  CUDA_CHECK(cudaGetLastError());
  // dq = dS k, dk = dS^T q, dv = P^T dout, each (T, hs) with leading dim 3C.
  for (int64_t h = 0; h < H; h++) {
    const T* q = qkv + h * L.head_col;
    const T* k = q + C;
    const T* dS = dprobs + h * L.probs_head;
    const T* P = probs + h * L.probs_head;
    T* dq = dqkv + h * L.head_col;
    const auto by_seq = over_sequences<T>(B, L.probs_seq, L.qkv_seq, L.qkv_seq);
    cuda_gemm(false, false, T_, L.hs, T_, 1.0f, dS, T_, k, L.C3, 0.0f, dq, L.C3, g, by_seq);
    cuda_gemm(true, false, T_, L.hs, T_, 1.0f, dS, T_, q, L.C3, 0.0f, dq + C, L.C3, g, by_seq);
    cuda_gemm(true, false, T_, L.hs, T_, 1.0f, P, T_, dout + h * L.head_col, C, 0.0f, dq + 2 * C,
              L.C3, g, over_sequences<T>(B, L.probs_seq, L.out_seq, L.qkv_seq));
  }
}

#define CUDA_ATTENTION_INSTANTIATE(T)                                                              \
  template void cuda_attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t,    \
                                          gpu_exec&);                                              \
  template void cuda_attention_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, \
                                           int64_t, int64_t, gpu_exec&);
FSDPGEN_FOR_EACH_DTYPE(CUDA_ATTENTION_INSTANTIATE)
