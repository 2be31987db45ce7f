// encoder (CUDA): the token and position embeddings' forward and backward
// (launchers in kernels.cuh). Forward takes a thread per value; the token
// embedding's gradient a block per run of equal tokens after CUB's radix
// sort (or, without scratch for it, a thread per channel and token class).
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/kernels_shared.cuh"
#include "runtime/dtype_pairs.h"

namespace {

constexpr int kEncoderThreads = 128;
// dwte: thread (c, s) adds the rows whose token is s modulo this, in position order.
constexpr int kEncoderTokenClasses = 32;
constexpr int kEncoderTokenChunk = 1024;  // tokens staged in shared memory at a time
// dwte with scratch: positions sorted by token, then a block per run of equal
// tokens adds its rows, this many loaded ahead of the in-order additions.
constexpr int kEncoderRowsInFlight = 8;
constexpr int kScratchAlignBytes = 256;  // each scratch array (and CUB's) starts aligned

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

}  // namespace

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

#define CUDA_ENCODER_INSTANTIATE_T(T)                                                        \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, \
                                   int64_t, cudaStream_t);

#define CUDA_ENCODER_INSTANTIATE_TG(T, G)                                                  \
  template void encoder_backward<T, G>(G*, G*, const T*, const int32_t*, int64_t, int64_t, \
                                       int64_t, void*, int64_t, cudaStream_t);

FSDPGEN_FOR_EACH_DTYPE(CUDA_ENCODER_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_ENCODER_INSTANTIATE_TG)
