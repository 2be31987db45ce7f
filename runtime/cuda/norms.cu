// norms (CUDA): LayerNorm and RMSNorm, forward and backward (launchers in
// kernels.cuh). Row kernels take a warp per row, with packed twins (128-bit
// accesses, the row read once into registers) taken where C and the
// pointers allow it; the parameter gradients' column sums a block per 32
// channels and chunk of rows. Reductions use warp shuffles and a fixed order.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/kernels_shared.cuh"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"

namespace {

constexpr int kRowsPerBlock = 8;  // LayerNorm: a warp per row
// LayerNorm's packed kernels keep a lane's share of a row in registers: up to
// this many 16-byte packs per lane, so rows of C <= 32 * 8 * (16 / sizeof(T))
// (2048 16-bit or 1024 fp32 values) are read from memory once.
constexpr int kPacksPerLane = 8;
constexpr int kColumnRowGroups = 32;  // column sums: a (32 channels, 32 row groups) block
constexpr int kColumnThreads = 256;   // the chunks' sums: a thread per channel

// A warp per row; mean and variance in two passes, as on CPU. kRms
// (RMSNorm, llama): no mean taken out (the "variance" is mean(x^2)), no bias,
// only rstd saved; LayerNorm and RMSNorm share these kernels. Each scales by
// w_off + weight: w_off is 0, or 1 for Gemma's RMSNorm (norm_plus_one). out
// null: the statistics only (a recompute's, as on the CPU).
template <class T, bool kRms>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp,
                                         const T* weight, const T* bias, int64_t N, int64_t C,
                                         float eps, float w_off) {
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
  for (int64_t c = lane; out != nullptr && c < C; c += kWarp) {
    const float y = (to_float(x[c]) - m) * s * (w_off + to_float(weight[c]));
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

// layernorm_forward_kernel with 128-bit accesses and the row held in
// registers: lane l holds packs l, l + 32, ... of its row, read once.
template <class D, bool kRms>
__global__ void layernorm_forward_packed_kernel(D* out, float* mean, float* rstd, const D* inp,
                                                const D* weight, const D* bias, int64_t N,
                                                int64_t C, float eps, float w_off) {
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
    if (i >= packs || out == nullptr) continue;
    const P wi = w[i];
    P bi{};
    if constexpr (!kRms) bi = b[i];
    P y;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const float v = (to_float(xs[r].v[k]) - m) * s * (w_off + to_float(wi.v[k]));
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
                                                       bool accumulate, float w_off) {
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
      const float dnorm = to_float(dys[r].v[k]) * (w_off + to_float(wi.v[k]));
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
      const float dnorm = to_float(dys[r].v[k]) * (w_off + to_float(wi.v[k]));
      const float d = layernorm_dinp_of(s, dnorm, xhat, dnorm_mean, dnorm_xhat_mean);
      out.v[k] = from_float<D>(accumulate ? to_float(prev.v[k]) + d : d);
    }
    dx[i] = out;
  }
}

// dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm =
// dout * (w_off + weight); a warp per row.
template <class T, bool kRms>
__global__ void layernorm_backward_input_kernel(T* dinp, const T* dout, const T* inp,
                                                const T* weight, const float* mean,
                                                const float* rstd, int64_t N, int64_t C,
                                                bool accumulate, float w_off) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  if (n >= N) return;  // the whole warp
  const T* x = inp + n * C;
  const T* dy = dout + n * C;
  const float m = kRms ? 0.0f : mean[n], s = rstd[n];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(dy[c]) * (w_off + to_float(weight[c]));
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * xhat;
  }
  const float dnorm_mean = kRms ? 0.0f : warp_reduce(dnorm_sum, sum_op{}) / static_cast<float>(C);
  const float dnorm_xhat_mean = warp_reduce(dnorm_xhat_sum, sum_op{}) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - m) * s;
    const float dnorm = to_float(dy[c]) * (w_off + to_float(weight[c]));
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

}  // namespace

// LayerNorm's and RMSNorm's launchers (kRms: mean and bias null).
template <class T, bool kRms>
void norm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                  int64_t N, int64_t C, float eps, float w_off, cudaStream_t stream) {
  if (N == 0) return;
  const dim3 grid = grid_dim(ceil_div(N, kRowsPerBlock));
  if (packed_rows<T>(C, {out, inp, weight, kRms ? nullptr : bias}))
    layernorm_forward_packed_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps, w_off);
  else
    layernorm_forward_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C, eps, w_off);
  CUDA_CHECK(cudaGetLastError());
}

template <class T, class G, bool kRms>
void norm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                   const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate,
                   float w_off, float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  if (N * C == 0) return;
  const dim3 grid = grid_dim(ceil_div(N, kRowsPerBlock));
  if (packed_rows<T>(C, {dinp, dout, inp, weight}))
    layernorm_backward_input_packed_kernel<device_t<T>, kRms>
        <<<grid, kRowsPerBlock * kWarp, 0, stream>>>(dev(dinp), dev(dout), dev(inp), dev(weight),
                                                     mean, rstd, N, C, accumulate, w_off);
  else
    layernorm_backward_input_kernel<device_t<T>, kRms><<<grid, kRowsPerBlock * kWarp, 0, stream>>>(
        dev(dinp), dev(dout), dev(inp), dev(weight), mean, rstd, N, C, accumulate, w_off);
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
  norm_forward<T, false>(out, mean, rstd, inp, weight, bias, N, C, kLayerNormEps, 0.0f, stream);
}

template <class T, class G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool accumulate,
                        float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  norm_backward<T, G, false>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, accumulate,
                             0.0f, scratch, scratch_floats, stream);
}

template <class T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, float weight_offset, cudaStream_t stream) {
  norm_forward<T, true>(out, nullptr, rstd, inp, weight, static_cast<const T*>(nullptr), N, C, eps,
                        weight_offset, stream);
}

template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate, float weight_offset,
                      float* scratch, int64_t scratch_floats, cudaStream_t stream) {
  norm_backward<T, G, true>(dinp, dweight, static_cast<G*>(nullptr), dout, inp, weight, nullptr,
                            rstd, N, C, accumulate, weight_offset, scratch, scratch_floats, stream);
}

#define CUDA_NORMS_INSTANTIATE_T(T)                                                                \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t,    \
                                     int64_t, cudaStream_t);                                       \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, float, \
                                   cudaStream_t);

#define CUDA_NORMS_INSTANTIATE_TG(T, G)                                                          \
  template void layernorm_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, const float*, \
                                         const float*, int64_t, int64_t, bool, float*, int64_t,  \
                                         cudaStream_t);                                          \
  template void rmsnorm_backward<T, G>(T*, G*, const T*, const T*, const T*, const float*,       \
                                       int64_t, int64_t, bool, float, float*, int64_t,           \
                                       cudaStream_t);

FSDPGEN_FOR_EACH_DTYPE(CUDA_NORMS_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_NORMS_INSTANTIATE_TG)
