// kernels (CUDA): the launchers of kernels.cuh and their kernels. Elementwise
// kernels take a thread per value; row kernels a warp per row (LayerNorm) or a
// block per row (cross-entropy, V is large); parameter-gradient column sums a
// block per 32 channels and chunk of rows; the token embedding's gradient a
// block per run of equal tokens after CUB's radix sort. Reductions use warp
// shuffles and a fixed order.
// LayerNorm's row kernels have packed twins (128-bit accesses, the row read
// once into registers) taken where C and the pointers allow it.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"
#include "runtime/kernels.h"
#include "runtime/optimizer_math.h"

namespace {

// ---------------------------------------------------------------- helpers

// exp with its argument clamped (runtime/kernel_math.h), the CPU's twin by name.
__device__ inline float exp_clamped(float x) {
  return expf(fminf(fmaxf(x, kExpArgMin), kExpArgMax));
}

constexpr int kElementwiseThreads = 256;
constexpr int kRowsPerBlock = 8;  // LayerNorm: a warp per row
// LayerNorm's packed kernels keep a lane's share of a row in registers: up to
// this many 16-byte packs per lane, so rows of C <= 32 * 8 * (16 / sizeof(T))
// (2048 16-bit or 1024 fp32 values) are read from memory once.
constexpr int kPacksPerLane = 8;
constexpr int kCrossEntropyThreads = 512;
constexpr int kColumnRowGroups = 32;  // column sums: a (32 channels, 32 row groups) block
constexpr int kColumnThreads = 256;   // the chunks' sums: a thread per channel
constexpr int kEncoderThreads = 128;
// dwte: thread (c, s) adds the rows whose token is s modulo this, in position order.
constexpr int kEncoderTokenClasses = 32;
constexpr int kEncoderTokenChunk = 1024;  // tokens staged in shared memory at a time
// dwte with scratch: positions sorted by token, then a block per run of equal
// tokens adds its rows, this many loaded ahead of the in-order additions.
constexpr int kEncoderRowsInFlight = 8;
constexpr int kScratchAlignBytes = 256;  // each scratch array (and CUB's) starts aligned
constexpr int kSumSquaresThreads = 512;
constexpr int kSumSquaresFinalThreads = 1024;

// ---------------------------------------------------------------- encoder

template <class T>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int64_t N, int64_t T_, int64_t C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= N * C) return;
  const int64_t n = i / C, c = i % C;
  const T e = wte[int64_t{tokens[n]} * C + c];
  out[i] = wpe ? from_float<T>(to_float(e) + to_float(wpe[(n % T_) * C + c])) : e;
}

// dwpe[t, c] += sum over b of dout[b, t, c]: a thread per (t, c), b in order.
template <class T, class G>
__global__ void encoder_backward_wpe_kernel(G* dwpe, const T* dout, int64_t B, int64_t T_,
                                            int64_t C) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= T_ * C) return;
  float acc = 0.0f;
  for (int64_t b = 0; b < B; b++)
    acc += to_float(dout[b * T_ * C + i]);
  dwpe[i] = from_float<G>(to_float(dwpe[i]) + acc);
}

// dwte[tokens[n], c] += dout[n, c]: thread (c, s) walks every position n in
// order and takes those whose token is s modulo kEncoderTokenClasses, so each
// (token, c) has one owner and its additions keep position order. A warp
// shares s, so its branch is uniform; tokens are staged in shared memory.
template <class T, class G>
__global__ void encoder_backward_wte_kernel(G* dwte, const T* dout, const int32_t* tokens,
                                            int64_t N, int64_t C) {
  __shared__ int32_t chunk[kEncoderTokenChunk];
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int32_t s = static_cast<int32_t>(blockIdx.y);
  for (int64_t n0 = 0; n0 < N; n0 += kEncoderTokenChunk) {
    const int64_t len = N - n0 < kEncoderTokenChunk ? N - n0 : kEncoderTokenChunk;
    __syncthreads();  // the previous chunk is read
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x)
      chunk[i] = tokens[n0 + i];
    __syncthreads();
    if (c >= C) continue;
    for (int64_t i = 0; i < len; i++) {
      const int32_t token = chunk[i];
      if (token % kEncoderTokenClasses != s) continue;
      G* dst = dwte + int64_t{token} * C + c;
      *dst = from_float<G>(to_float(*dst) + to_float(dout[(n0 + i) * C + c]));
    }
  }
}

// The pairs the radix sort orders: keys[n] = tokens[n], positions[n] = n.
__global__ void encoder_sort_pairs_kernel(uint32_t* keys, int32_t* positions, const int32_t* tokens,
                                          int64_t N) {
  const int64_t n = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (n >= N) return;
  keys[n] = static_cast<uint32_t>(tokens[n]);
  positions[n] = static_cast<int32_t>(n);
}

// dwte[token] += the dout rows of a run of equal tokens in keys (positions
// sorted stably by token, so each run's positions are in increasing order).
// Block i works only where sorted index i starts a run; a thread per channel
// adds the run's rows in order, rounding to G after each as the CPU does,
// with kEncoderRowsInFlight rows loaded ahead.
template <class T, class G>
__global__ void encoder_backward_wte_runs_kernel(G* dwte, const T* dout, const uint32_t* keys,
                                                 const int32_t* positions, int64_t N, int64_t C) {
  const int64_t first = blockIdx.x;
  const uint32_t token = keys[first];
  if (first > 0 && keys[first - 1] == token) return;  // inside a run: its first block adds it
  int64_t end = first + 1;
  while (end < N && keys[end] == token)
    end++;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    G* dst = dwte + int64_t{token} * C + c;
    float acc = to_float(*dst);
    for (int64_t j = first; j < end; j += kEncoderRowsInFlight) {
      float row[kEncoderRowsInFlight];
#pragma unroll
      for (int k = 0; k < kEncoderRowsInFlight; k++)
        row[k] = j + k < end ? to_float(dout[int64_t{positions[j + k]} * C + c]) : 0.0f;
#pragma unroll
      for (int k = 0; k < kEncoderRowsInFlight; k++)
        if (j + k < end) acc = to_float(from_float<G>(acc + row[k]));
    }
    *dst = from_float<G>(acc);
  }
}

// ---------------------------------------------------------------- layernorm

// A warp per row; mean and variance in two passes, as on CPU. kRms
// (RMSNorm, llama): no mean taken out (the "variance" is mean(x^2)), no bias,
// only rstd saved; LayerNorm and RMSNorm share these kernels.
template <class T, bool kRms>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int64_t N, int64_t C,
                                         float eps) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (n >= N) return;  // the whole warp
  const T* x = inp + n * C;
  float m = 0.0f;
  if constexpr (!kRms) {
    float sum = 0.0f;
    for (int64_t c = lane; c < C; c += kWarp)
      sum += to_float(x[c]);
    m = warp_reduce(sum, sum_op{}) / static_cast<float>(C);
  }
  float var = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float d = to_float(x[c]) - m;
    var += d * d;
  }
  const float s = 1.0f / sqrtf(warp_reduce(var, sum_op{}) / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += kWarp) {
    const float y = (to_float(x[c]) - m) * s * to_float(weight[c]);
    if constexpr (kRms)
      out[n * C + c] = from_float<T>(y);
    else
      out[n * C + c] = from_float<T>(y + to_float(bias[c]));
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[n] = m;
    rstd[n] = s;
  }
}

// 16 bytes of a row, read and written as one 128-bit access.
template <class D>
struct alignas(16) pack16 {
  static constexpr int kElems = 16 / sizeof(D);
  D v[kElems];
};

// Whether LayerNorm's packed kernels take rows of C values of D with these
// pointers: C a whole number of packs, at most kPacksPerLane per lane, and
// every pointer 16-byte aligned (so is every row).
template <class D>
bool packed_rows(int64_t C, std::initializer_list<const void*> ptrs) {
  constexpr int64_t V = pack16<D>::kElems;
  if (C % V != 0 || C > kPacksPerLane * kWarp * V) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Whether the cross-entropy kernel reads rows of Vp logits in 16-byte packs:
// the first row and the row width aligned to them.
template <class T>
bool packed_logits(const T* logits, int64_t Vp) {
  return reinterpret_cast<uintptr_t>(logits) % 16 == 0 && Vp * sizeof(T) % 16 == 0;
}

// layernorm_forward_kernel with 128-bit accesses and the row held in
// registers: lane l holds packs l, l + 32, ... of its row, read once.
template <class D, bool kRms>
__global__ void layernorm_forward_packed_kernel(D* out, float* mean, float* rstd, const D* inp,
                                                const D* weight, const D* bias, int64_t N,
                                                int64_t C, float eps) {
  using P = pack16<D>;
  constexpr int V = P::kElems;
  const int lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (n >= N) return;  // the whole warp
  const int64_t packs = C / V;
  const P* x = reinterpret_cast<const P*>(inp + n * C);
  P xs[kPacksPerLane];
  float sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kPacksPerLane; r++) {
    const int64_t i = r * kWarp + lane;
    if (i >= packs) continue;
    xs[r] = x[i];
#pragma unroll
    for (int k = 0; k < V; k++)
      sum += to_float(xs[r].v[k]);
  }
  const float m = kRms ? 0.0f : warp_reduce(sum, sum_op{}) / static_cast<float>(C);
  float var = 0.0f;
#pragma unroll
  for (int r = 0; r < kPacksPerLane; r++) {
    if (r * kWarp + lane >= packs) continue;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float d = to_float(xs[r].v[k]) - m;
      var += d * d;
    }
  }
  const float s = 1.0f / sqrtf(warp_reduce(var, sum_op{}) / static_cast<float>(C) + eps);
  const P* w = reinterpret_cast<const P*>(weight);
  const P* b = reinterpret_cast<const P*>(bias);
  P* o = reinterpret_cast<P*>(out + n * C);
#pragma unroll
  for (int r = 0; r < kPacksPerLane; r++) {
    const int64_t i = r * kWarp + lane;
    if (i >= packs) continue;
    const P wi = w[i];
    P bi{};
    if constexpr (!kRms) bi = b[i];
    P y;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float v = (to_float(xs[r].v[k]) - m) * s * to_float(wi.v[k]);
      y.v[k] = from_float<D>(kRms ? v : v + to_float(bi.v[k]));
    }
    o[i] = y;
  }
  if (lane == 0) {
    if constexpr (!kRms) mean[n] = m;
    rstd[n] = s;
  }
}

// layernorm_backward_input_kernel with 128-bit accesses, x and dout of the
// row held in registers (read once), dinp read once when accumulating.
template <class D, bool kRms>
__global__ void layernorm_backward_input_packed_kernel(D* dinp, const D* dout, const D* inp,
                                                       const D* weight, const float* mean,
                                                       const float* rstd, int64_t N, int64_t C,
                                                       bool accumulate) {
  using P = pack16<D>;
  constexpr int V = P::kElems;
  const int lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (n >= N) return;  // the whole warp
  const int64_t packs = C / V;
  const P* x = reinterpret_cast<const P*>(inp + n * C);
  const P* dy = reinterpret_cast<const P*>(dout + n * C);
  const P* w = reinterpret_cast<const P*>(weight);
  const float m = kRms ? 0.0f : mean[n], s = rstd[n];
  P xs[kPacksPerLane], dys[kPacksPerLane];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
#pragma unroll
  for (int r = 0; r < kPacksPerLane; r++) {
    const int64_t i = r * kWarp + lane;
    if (i >= packs) continue;
    xs[r] = x[i];
    dys[r] = dy[i];
    const P wi = w[i];
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float xhat = (to_float(xs[r].v[k]) - m) * s;
      const float dnorm = to_float(dys[r].v[k]) * to_float(wi.v[k]);
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * xhat;
    }
  }
  // RMSNorm's gradient has no mean term (rmsnorm_dinp_of).
  const float dnorm_mean = kRms ? 0.0f : warp_reduce(dnorm_sum, sum_op{}) / static_cast<float>(C);
  const float dnorm_xhat_mean = warp_reduce(dnorm_xhat_sum, sum_op{}) / static_cast<float>(C);
  P* dx = reinterpret_cast<P*>(dinp + n * C);
#pragma unroll
  for (int r = 0; r < kPacksPerLane; r++) {
    const int64_t i = r * kWarp + lane;
    if (i >= packs) continue;
    const P wi = w[i];
    P prev{};
    if (accumulate) prev = dx[i];
    P out;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float xhat = (to_float(xs[r].v[k]) - m) * s;
      const float dnorm = to_float(dys[r].v[k]) * to_float(wi.v[k]);
      const float d = layernorm_dinp_of(s, dnorm, xhat, dnorm_mean, dnorm_xhat_mean);
      out.v[k] = from_float<D>(accumulate ? to_float(prev.v[k]) + d : d);
    }
    dx[i] = out;
  }
}

// dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight;
// a warp per row.
template <class T, bool kRms>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int64_t N, int64_t C,
                                                bool accumulate) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (n >= N) return;  // the whole warp
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const float m = kRms ? 0.0f : mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * xhat;
  }
  const float dnorm_mean = kRms ? 0.0f : warp_reduce(dnorm_sum, sum_op{}) / static_cast<float>(C);
  const float dnorm_xhat_mean = warp_reduce(dnorm_xhat_sum, sum_op{}) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    const float d = layernorm_dinp_of(s, dnorm, xhat, dnorm_mean, dnorm_xhat_mean);
    dinp[n * C + c] = from_float<T>(accumulate ? to_float(dinp[n * C + c]) + d : d);
  }
}

// dweight[c] += sum over rows of dout * xhat, dbias[c] += sum of dout (mean
// null: RMSNorm's xhat = x * rstd; dbias null: none). Block
// (32, kColumnRowGroups): threadIdx.x a channel, threadIdx.y a row group
// (rows y, y + groups, ... of the block row's chunk [y0, y0 + rows_per_chunk));
// the groups' sums are added in order. Without partials (one chunk) they are
// added once into G; with them, chunk blockIdx.y writes its fp32 sums to
// row blockIdx.y of dw_part and db_part (chunks, C) for
// layernorm_params_sum_kernel.
template <class T, class G>
__global__ void layernorm_backward_params_kernel(G* dweight, G* dbias, float* dw_part,
                                                 float* db_part, const T* dout, const T* inp,
                                                 const float* mean, const float* rstd, int64_t N,
                                                 int64_t C, int64_t rows_per_chunk) {
  __shared__ float dw_sums[kColumnRowGroups][kWarp], db_sums[kColumnRowGroups][kWarp];
  const int64_t c = blockIdx.x * int64_t{kWarp} + threadIdx.x;
  const int64_t first = blockIdx.y * rows_per_chunk;
  const int64_t end = first + rows_per_chunk < N ? first + rows_per_chunk : N;
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int64_t n = first + threadIdx.y; n < end; n += kColumnRowGroups) {
      const float dy = to_float(dout[n * C + c]);
      dw += dy * (to_float(inp[n * C + c]) - (mean ? mean[n] : 0.0f)) * rstd[n];
      db += dy;
    }
  }
  dw_sums[threadIdx.y][threadIdx.x] = dw;
  db_sums[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  float dw_sum = 0.0f, db_sum = 0.0f;
  for (int g = 0; g < kColumnRowGroups; g++) {
    dw_sum += dw_sums[g][threadIdx.x];
    db_sum += db_sums[g][threadIdx.x];
  }
  if (dw_part) {
    dw_part[blockIdx.y * C + c] = dw_sum;
    db_part[blockIdx.y * C + c] = db_sum;
    return;
  }
  dweight[c] = from_float<G>(to_float(dweight[c]) + dw_sum);
  if (dbias) dbias[c] = from_float<G>(to_float(dbias[c]) + db_sum);
}

// dweight[c] += the chunks' dw_part[k][c] summed in chunk order (dbias alike).
template <class G>
__global__ void layernorm_params_sum_kernel(G* dweight, G* dbias, const float* dw_part,
                                            const float* db_part, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float dw = 0.0f, db = 0.0f;
  for (int64_t k = 0; k < chunks; k++) {
    dw += dw_part[k * C + c];
    db += db_part[k * C + c];
  }
  dweight[c] = from_float<G>(to_float(dweight[c]) + dw);
  if (dbias) dbias[c] = from_float<G>(to_float(dbias[c]) + db);
}

// ---------------------------------------------------------------- elementwise

// GELU's formulas: runtime/kernel_math.h, shared with the CPU kernels.
template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  out[i] = from_float<T>(gelu_of(x, exp_clamped(-2.0f * gelu_tanh_arg(x))));
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  const float e = exp_clamped(-2.0f * gelu_tanh_arg(x));
  dinp[i] = from_float<T>(gelu_grad_of(x, e) * to_float(dout[i]));
}

// SwiGLU's formulas: runtime/kernel_math.h, shared with the CPU kernels.
template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]);
  out[i] = from_float<T>(swiglu_of(g, to_float(up[i]), exp_clamped(-g)));
}

template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                       int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]), u = to_float(up[i]), dy = to_float(dout[i]);
  const float e = exp_clamped(-g);
  dgate[i] = from_float<T>(dy * swiglu_dgate_of(g, u, e));
  dup[i] = from_float<T>(dy * g / (1.0f + e));
}

// Rotary positions: a thread per pair (i, i + D/2) of a head of a row, turned
// by rope_rotate (or back, with `back`) at the row's position (row % T).
template <class T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int64_t N, int64_t T_,
                            int64_t heads, int64_t D, bool back) {
  const int64_t half = D / 2;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= N * heads * half) return;
  const int64_t i = idx % half, row = idx / half;  // row = n * heads + h
  const int64_t t = (row / heads) % T_;
  T* head = x + row * D;
  float x1 = to_float(head[i]), x2 = to_float(head[i + half]);
  if (back)
    rope_unrotate(x1, x2, cos[t * half + i], sin[t * half + i]);
  else
    rope_rotate(x1, x2, cos[t * half + i], sin[t * half + i]);
  head[i] = from_float<T>(x1);
  head[i + half] = from_float<T>(x2);
}

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

// ---------------------------------------------------------------- cross-entropy

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

// A block per row, reading its V true columns twice: once for the softmax
// statistics (online), once to write the gradient in place; the padded
// columns [V, Vp) are written zero. With `packed` (rows 16-byte aligned) each
// access is a 16-byte pack of columns. The scale is *dloss_scale_ptr when that
// is set, else dloss_scale.
template <class D>
__global__ void cross_entropy_fused_kernel(D* logits, float* losses, const int32_t* targets,
                                           int64_t V, int64_t Vp, const float* dloss_scale_ptr,
                                           float dloss_scale, bool packed) {
  using P = pack16<D>;
  if (dloss_scale_ptr != nullptr) dloss_scale = *dloss_scale_ptr;
  const int64_t n = blockIdx.x;
  D* x = logits + n * Vp;
  const int64_t target = targets[n];
  // Read before the reduction's barrier, so before any thread overwrites the row.
  const float target_logit = threadIdx.x == 0 ? to_float(x[target]) : 0.0f;
  const int64_t width = packed ? P::kElems : 1;  // columns per access
  const int64_t stride = width * blockDim.x;
  softmax_stats st;
  for (int64_t v0 = threadIdx.x * width; v0 < V; v0 += stride) {
    if (!packed) {
      st = softmax_add(st, to_float(x[v0]));
      continue;
    }
    const P p = *reinterpret_cast<const P*>(x + v0);
#pragma unroll
    for (int k = 0; k < P::kElems; k++)
      if (v0 + k < V) st = softmax_add(st, to_float(p.v[k]));
  }
  st = block_softmax_stats(st);
  if (threadIdx.x == 0) losses[n] = logf(st.sum) + st.max - target_logit;
  const float inv = 1.0f / st.sum;
  const auto grad = [&](int64_t v, float xv) {
    if (v >= V) return from_float<D>(0.0f);
    const float prob = exp_clamped(xv - st.max) * inv;
    return from_float<D>(dloss_scale * (prob - (v == target ? 1.0f : 0.0f)));
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

// ---------------------------------------------------------------- optimizer and norm

// c1, c2: the bias corrections 1 - beta^t; wd: weight decay, 0 when not decayed.
template <class G>
__global__ void adamw_kernel(float* master, float* m, float* v, const G* grad, int64_t begin,
                             int64_t end, float lr, float beta1, float beta2, float c1, float c2,
                             float eps, float wd, float grad_scale) {
  const int64_t i = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= end) return;
  adamw_update(master[i], m[i], v[i], to_float(grad[i]) * grad_scale, lr, beta1, beta2, c1, c2, eps,
               wd);
}

// partial[block] = sum of x[i]^2 over the block's grid-stride share of [0, n).
template <class G>
__global__ void sum_squares_partial_kernel(float* partial, const G* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float xi = to_float(x[i]);
    acc += xi * xi;
  }
  acc = block_reduce(acc, sum_op{}, 0.0f);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_squares_final_kernel(float* sum, const float* partial, int64_t count) {
  block_add_sum(sum, partial, count);
}

template <class G>
void adamw_launch(float* master, float* m, float* v, const G* grad, int64_t begin, int64_t end,
                  float lr, float beta1, float beta2, float c1, float c2, float eps, float wd,
                  float grad_scale, cudaStream_t stream) {
  adamw_kernel<<<grid_dim(ceil_div(end - begin, kElementwiseThreads)), kElementwiseThreads, 0,
                 stream>>>(master, m, v, dev(grad), begin, end, lr, beta1, beta2, c1, c2, eps, wd,
                           grad_scale);
  CUDA_CHECK(cudaGetLastError());
}

template <class G>
void sum_squares_launch(float* sum, float* scratch, const G* x, int64_t n, cudaStream_t stream) {
  const int64_t blocks = std::min(kSumSquaresScratchFloats, ceil_div(n, kSumSquaresThreads));
  sum_squares_partial_kernel<<<grid_dim(blocks), kSumSquaresThreads, 0, stream>>>(scratch, dev(x),
                                                                                  n);
  CUDA_CHECK(cudaGetLastError());
  sum_squares_final_kernel<<<1, kSumSquaresFinalThreads, 0, stream>>>(sum, scratch, blocks);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// ---------------------------------------------------------------- launchers

template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C, cudaStream_t stream) {
  const int64_t N = B * T_;
  if (N * C == 0) return;
  encoder_forward_kernel<<<grid_dim(ceil_div(N * C, kElementwiseThreads)), kElementwiseThreads, 0,
                           stream>>>(dev(out), tokens, dev(wte), dev(wpe), N, T_, C);
  CUDA_CHECK(cudaGetLastError());
}

// The arrays of the sorted dwte within encoder_backward's scratch: keys and
// positions twice (the radix sort's double buffers), then CUB's own
// temporary storage; empty when the scratch is too small (or null).
struct encoder_sort_arrays {
  cub::DoubleBuffer<uint32_t> keys;
  cub::DoubleBuffer<int32_t> positions;
  void* temp = nullptr;
  size_t temp_bytes = 0;
};

int64_t aligned_bytes(int64_t bytes) {
  return ceil_div(bytes, kScratchAlignBytes) * kScratchAlignBytes;
}

bool carve_encoder_sort(encoder_sort_arrays& a, void* scratch, int64_t scratch_bytes, int64_t N,
                        cudaStream_t stream) {
  if (scratch == nullptr || N > 0x7fffffff) return false;
  const int64_t pad_bytes =
      (kScratchAlignBytes - reinterpret_cast<uintptr_t>(scratch) % kScratchAlignBytes) %
      kScratchAlignBytes;
  auto* base = static_cast<std::byte*>(scratch) + pad_bytes;
  scratch_bytes -= pad_bytes;
  const int64_t array_bytes = aligned_bytes(N * 4);
  if (4 * array_bytes > scratch_bytes) return false;
  a.keys = cub::DoubleBuffer<uint32_t>(reinterpret_cast<uint32_t*>(base),
                                       reinterpret_cast<uint32_t*>(base + array_bytes));
  a.positions = cub::DoubleBuffer<int32_t>(reinterpret_cast<int32_t*>(base + 2 * array_bytes),
                                           reinterpret_cast<int32_t*>(base + 3 * array_bytes));
  // Sizing only: with no storage given, CUB computes what it needs and launches nothing.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, a.temp_bytes, a.keys, a.positions,
                                             static_cast<int>(N), 0, 32, stream));
  if (4 * array_bytes + static_cast<int64_t>(a.temp_bytes) > scratch_bytes) return false;
  a.temp = base + 4 * array_bytes;
  return true;
}

template <class T, class G>
void encoder_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                      int64_t C, void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  const int64_t N = B * T_;
  if (N * C == 0) return;
  if (dwpe) {
    encoder_backward_wpe_kernel<<<grid_dim(ceil_div(T_ * C, kElementwiseThreads)),
                                  kElementwiseThreads, 0, stream>>>(dev(dwpe), dev(dout), B, T_, C);
    CUDA_CHECK(cudaGetLastError());
  }
  encoder_sort_arrays a;
  if (!carve_encoder_sort(a, scratch, scratch_bytes, N, stream)) {
    encoder_backward_wte_kernel<<<grid_dim(ceil_div(C, kEncoderThreads), kEncoderTokenClasses),
                                  kEncoderThreads, 0, stream>>>(dev(dwte), dev(dout), tokens, N, C);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  encoder_sort_pairs_kernel<<<grid_dim(ceil_div(N, kElementwiseThreads)), kElementwiseThreads, 0,
                              stream>>>(a.keys.Current(), a.positions.Current(), tokens, N);
  CUDA_CHECK(cudaGetLastError());
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(a.temp, a.temp_bytes, a.keys, a.positions,
                                             static_cast<int>(N), 0, 32, stream));
  encoder_backward_wte_runs_kernel<<<grid_dim(N), kEncoderThreads, 0, stream>>>(
      dev(dwte), dev(dout), a.keys.Current(), a.positions.Current(), N, C);
  CUDA_CHECK(cudaGetLastError());
}

// LayerNorm's and RMSNorm's launchers (kRms: mean and bias null).
template <class T, bool kRms>
void norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                  int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N == 0) return;
  const dim3 grid = grid_dim(ceil_div(N, kRowsPerBlock));
  if (packed_rows<T>(C, {out, inp, weight, kRms ? nullptr : bias}))
    layernorm_forward_packed_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps);
  else
    layernorm_forward_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps);
  CUDA_CHECK(cudaGetLastError());
}

template <class T, class G, bool kRms>
void norm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate,
                   float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  if (N * C == 0) return;
  const dim3 grid = grid_dim(ceil_div(N, kRowsPerBlock));
  if (packed_rows<T>(C, {dinp, dout, inp, weight}))
    layernorm_backward_input_packed_kernel<device_t<T>, kRms>
        <<<grid, kRowsPerBlock * kWarp, 0, stream>>>(dev(dinp), dev(dout), dev(inp), dev(weight),
                                                     mean, rstd, N, C, accumulate);
  else
    layernorm_backward_input_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(dinp), dev(dout), dev(inp), dev(weight), mean, rstd, N, C, accumulate);
  CUDA_CHECK(cudaGetLastError());
  // As many chunks of rows as the scratch holds sums for (two rows of C each), up to
  // one per kLayerNormParamRowsPerChunk rows; one chunk adds straight into dweight and dbias.
  const int64_t fit = scratch ? scratch_floats / (2 * C) : 1;
  const int64_t chunks = std::max<int64_t>(
      1, std::min({ceil_div(N, kLayerNormParamRowsPerChunk), fit, int64_t{65535}}));
  const int64_t rows_per_chunk = ceil_div(N, chunks);
  float* dw_part = chunks > 1 ? scratch : nullptr;
  float* db_part = chunks > 1 ? scratch + chunks * C : nullptr;
  layernorm_backward_params_kernel<<<grid_dim(ceil_div(C, kWarp), chunks),
                                     dim3(kWarp, kColumnRowGroups), 0, stream>>>(
      dev(dweight), dev(dbias), dw_part, db_part, dev(dout), dev(inp), mean, rstd, N, C,
      rows_per_chunk);
  CUDA_CHECK(cudaGetLastError());
  if (chunks == 1) return;
  layernorm_params_sum_kernel<<<grid_dim(ceil_div(C, kColumnThreads)), kColumnThreads, 0, stream>>>(
      dev(dweight), dev(dbias), dw_part, db_part, chunks, C);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int64_t N, int64_t C, cudaStream_t stream) {
  norm_forward<T, false>(out, mean, rstd, inp, weight, bias, N, C, kLayerNormEps, stream);
}

template <class T, class G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate,
                        float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  norm_backward<T, G, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate,
                             scratch, scratch_floats, stream);
}

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream) {
  norm_forward<T, true>(out, nullptr, rstd, inp, weight, static_cast<const T*>(nullptr), N, C, eps,
                        stream);
}

template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate, float* scratch,
                      int64_t scratch_floats, cudaStream_t stream) {
  norm_backward<T, G, true>(dinp, dweight, static_cast<G*>(nullptr), dout, inp, weight, nullptr,
                            rstd, N, C, accumulate, scratch, scratch_floats, stream);
}

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                        stream>>>(dev(out), dev(inp), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                         stream>>>(dev(dinp), dev(inp), dev(dout), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                          stream>>>(dev(out), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                           stream>>>(dev(dgate), dev(dup), dev(dout), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void rope_launch(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                 int64_t D, bool back, cudaStream_t stream) {
  const int64_t pairs = N * heads * (D / 2);
  if (pairs == 0) return;
  rope_kernel<<<grid_dim(ceil_div(pairs, kElementwiseThreads)), kElementwiseThreads, 0, stream>>>(
      dev(x), cos, sin, N, T_, heads, D, back);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void rope_forward(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                  int64_t D, cudaStream_t stream) {
  rope_launch(x, cos, sin, N, T_, heads, D, false, stream);
}

template <class T>
void rope_backward(T* dx, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                   int64_t D, cudaStream_t stream) {
  rope_launch(dx, cos, sin, N, T_, heads, D, true, stream);
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                            stream>>>(dev(out), dev(a), dev(b), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, float dloss_scale, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_fused_kernel<<<grid_dim(N), kCrossEntropyThreads, 0, stream>>>(
      dev(logits), losses, targets, V, Vp, nullptr, dloss_scale, packed_logits(logits, Vp));
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, const float* dloss_scale, cudaStream_t stream) {
  if (N == 0) return;
  cross_entropy_fused_kernel<<<grid_dim(N), kCrossEntropyThreads, 0, stream>>>(
      dev(logits), losses, targets, V, Vp, dloss_scale, 0.0f, packed_logits(logits, Vp));
  CUDA_CHECK(cudaGetLastError());
}

void optimizer_adamw(float* master, float* m, float* v, const void* grad, dtype_id g, int64_t begin,
                     int64_t end, float lr, float beta1, float beta2, float eps, float weight_decay,
                     bool decay, int64_t t, float grad_scale, cudaStream_t stream) {
  if (end <= begin) return;
  // Computed as optimizer_adamw computes them (std::pow in float).
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  const float wd = decay ? weight_decay : 0.0f;
  switch (g) {
    case dtype_id::fp32:
      return adamw_launch(master, m, v, static_cast<const float*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
    case dtype_id::bf16:
      return adamw_launch(master, m, v, static_cast<const bf16*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
    case dtype_id::fp16:
      return adamw_launch(master, m, v, static_cast<const fp16*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
  }
}

void cuda_sum_squares(float* sum, float* scratch, const void* x, dtype_id t, int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  switch (t) {
    case dtype_id::fp32:
      return sum_squares_launch(sum, scratch, static_cast<const float*>(x), n, stream);
    case dtype_id::bf16:
      return sum_squares_launch(sum, scratch, static_cast<const bf16*>(x), n, stream);
    case dtype_id::fp16:
      return sum_squares_launch(sum, scratch, static_cast<const fp16*>(x), n, stream);
  }
}

#define CUDA_KERNELS_INSTANTIATE_T(T)                                                            \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,     \
                                   int64_t, cudaStream_t);                                       \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t,  \
                                     int64_t, cudaStream_t);                                     \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                 \
  template void residual_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);              \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float,      \
                                   cudaStream_t);                                                \
  template void swiglu_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, cudaStream_t); \
  template void rope_forward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t,       \
                                int64_t, cudaStream_t);                                          \
  template void rope_backward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t,      \
                                 int64_t, cudaStream_t);                                         \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t,    \
                                       float, cudaStream_t);                                     \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t,    \
                                       const float*, cudaStream_t);

#define CUDA_KERNELS_INSTANTIATE_TG(T, G)                                                        \
  template void encoder_backward<T, G>(G*, G*, const T*, const int32_t*, int64_t, int64_t,       \
                                       int64_t, void*, int64_t, cudaStream_t);                   \
  template void layernorm_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, const float*, \
                                         const float*, int64_t, int64_t, bool, float*, int64_t,  \
                                         cudaStream_t);                                          \
  template void rmsnorm_backward<T, G>(T*, G*, const T*, const T*, const T*, const float*,       \
                                       int64_t, int64_t, bool, float*, int64_t, cudaStream_t);

FSDPGEN_FOR_EACH_DTYPE(CUDA_KERNELS_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_KERNELS_INSTANTIATE_TG)
