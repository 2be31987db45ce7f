// gemm (CUDA): cuda_gemm's argument checks and launchers (cuBLASLt through
// the plans of gemm_plan.h, or the tiled kernel for the operand combinations
// cuBLASLt lacks), and the bias gradient's column sums (see gemm.h).
#include "runtime/cuda/gemm.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/gemm_plan.h"
#include "runtime/cuda/kernels.cuh"
#include "runtime/dtype_pairs.h"

gpu_gemm_cache* gpu_gemm_cache_create() {
  return new gpu_gemm_cache;
}

void gpu_gemm_cache_destroy(gpu_gemm_cache* cache) {
  delete cache;
}

int64_t gpu_gemm_cache_plans(const gpu_gemm_cache* cache) {
  std::lock_guard<std::mutex> lock(cache->mutex);
  return static_cast<int64_t>(cache->plans.size());
}

int64_t gpu_gemm_cache_fused_plans(const gpu_gemm_cache* cache) {
  std::lock_guard<std::mutex> lock(cache->mutex);
  return std::count_if(cache->plans.begin(), cache->plans.end(),
                       [](const auto& plan) { return plan->key.epilogue != 0 && plan->available; });
}

namespace {

// ---------------------------------------------------------------- types

// A storage type's cuBLASLt data type.
template <class T>
struct lt_type;
template <>
struct lt_type<float> {
  static constexpr cudaDataType_t value = CUDA_R_32F;
};
template <>
struct lt_type<bf16> {
  static constexpr cudaDataType_t value = CUDA_R_16BF;
};
template <>
struct lt_type<fp16> {
  static constexpr cudaDataType_t value = CUDA_R_16F;
};

// The combinations cuBLASLt multiplies with CUBLAS_COMPUTE_32F: A and B of
// one type, and D no narrower than them except 16 bits -> the same 16 bits.
template <class TA, class TB, class TC>
constexpr bool lt_supported = std::is_same_v<TA, TB> &&
                              (std::is_same_v<TC, float> || std::is_same_v<TA, TC>);

// The largest power of two, at most 256, dividing the address and the byte
// offsets ld_bytes and stride_bytes (so every row and batch item shares it).
int64_t alignment_bytes(const void* p, int64_t ld_bytes, int64_t stride_bytes) {
  const uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) |
                        static_cast<uint64_t>(ld_bytes) | static_cast<uint64_t>(stride_bytes) |
                        uint64_t{256};
  return static_cast<int64_t>(bits & (~bits + 1));
}

// ---------------------------------------------------------------- arguments

template <class TC>
void check_gemm_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     int64_t lda, int64_t ldb, float beta, int64_t ldc,
                     const cuda_gemm_extras<TC>& e) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("cuda_gemm(M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                " K=" + std::to_string(K) + "): " + what);
  };
  if (M < 0 || N < 0 || K < 0) fail("negative dimension");
  // Row lengths of the stored row-major A, B and C.
  const int64_t a_row = trans_a ? M : K, b_row = trans_b ? K : N;
  if (lda < a_row) fail("lda=" + std::to_string(lda) + " < " + std::to_string(a_row));
  if (ldb < b_row) fail("ldb=" + std::to_string(ldb) + " < " + std::to_string(b_row));
  if (ldc < N) fail("ldc=" + std::to_string(ldc) + " < N");
  if (e.batch < 0 || e.batch > 0x7fffffff) fail("batch " + std::to_string(e.batch));
  if (e.stride_a < 0 || e.stride_b < 0 || e.stride_c < 0) fail("negative batch stride");
  if (e.bias && e.batch != 1) fail("a bias epilogue with batch " + std::to_string(e.batch));
  if (e.epilogue == gemm_epilogue::none) return;
  const std::string name = epilogue_name(e.epilogue);
  if (e.bias && e.epilogue != gemm_epilogue::gelu_aux) fail(name + " epilogue with a bias");
  if (e.batch != 1) fail(name + " epilogue with batch " + std::to_string(e.batch));
  if (alpha != 1.0f) fail(name + " epilogue with alpha " + std::to_string(alpha) + " (needs 1)");
  if (e.epilogue == gemm_epilogue::bgrad_b) {
    if (!std::is_same_v<TC, float>) fail("bgrad_b epilogue with a 16-bit C (needs fp32)");
    if (trans_b || ldb != N) fail("bgrad_b epilogue needs B untransposed with ldb == N");
    if (e.bias_grad == nullptr) fail("bgrad_b epilogue without bias_grad");
    return;
  }
  if (beta != 0.0f) fail(name + " epilogue with beta " + std::to_string(beta) + " (needs 0)");
  if (e.aux == nullptr) fail(name + " epilogue without aux");
  if (ldc != N || e.aux_ld != N)
    fail(name + " epilogue needs ldc == aux_ld == N (ldc=" + std::to_string(ldc) +
         " aux_ld=" + std::to_string(e.aux_ld) + ")");
  if (e.epilogue == gemm_epilogue::gelu_aux && e.bias == nullptr)
    fail("gelu_aux epilogue without bias");
}

// ---------------------------------------------------------------- fallback kernel

constexpr int kFallbackTile = 64;   // output tile edge (rows and columns)
constexpr int kFallbackTileK = 16;  // K per shared-memory stage
constexpr int kFallbackLanes = 16;  // threads per tile edge; each owns 4 x 4 outputs
constexpr int kFallbackThreads = kFallbackLanes * kFallbackLanes;
constexpr int kFallbackSub = kFallbackTile / kFallbackLanes;

// One (64 x 64) tile of C of batch item blockIdx.z: op(A) and op(B) staged
// in fp32 through shared memory 16 columns of K at a time, thread (tx, ty)
// accumulating rows ty + 16 r and columns tx + 16 c. Tiles are padded by one
// column so that stores along K hit distinct banks.
template <class DA, class DB, class DC>
__global__ void __launch_bounds__(kFallbackThreads)
    gemm_fallback_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const DA* A, int64_t lda, int64_t stride_a, const DB* B, int64_t ldb,
                         int64_t stride_b, float beta, const DC* c_in, DC* C, int64_t ldc,
                         int64_t stride_c, const DC* bias) {
  __shared__ float a_tile[kFallbackTileK][kFallbackTile + 1];  // [k][i] = op(A)[i0 + i][k0 + k]
  __shared__ float b_tile[kFallbackTileK][kFallbackTile + 1];  // [k][j] = op(B)[k0 + k][j0 + j]
  const int64_t z = blockIdx.z;
  A += z * stride_a;
  B += z * stride_b;
  c_in += z * stride_c;
  C += z * stride_c;
  const int64_t i0 = int64_t{blockIdx.x} * kFallbackTile, j0 = int64_t{blockIdx.y} * kFallbackTile;
  const int tx = threadIdx.x % kFallbackLanes, ty = threadIdx.x / kFallbackLanes;
  float acc[kFallbackSub][kFallbackSub] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kFallbackTileK) {
    // Consecutive threads load consecutive addresses of the stored matrices.
    for (int l = threadIdx.x; l < kFallbackTile * kFallbackTileK; l += kFallbackThreads) {
      const int ai = trans_a ? l % kFallbackTile : l / kFallbackTileK;
      const int ak = trans_a ? l / kFallbackTile : l % kFallbackTileK;
      const int64_t gi = i0 + ai, gak = k0 + ak;
      float a = 0.0f;
      if (gi < M && gak < K) a = to_float(trans_a ? A[gak * lda + gi] : A[gi * lda + gak]);
      a_tile[ak][ai] = a;
      const int bj = trans_b ? l / kFallbackTileK : l % kFallbackTile;
      const int bk = trans_b ? l % kFallbackTileK : l / kFallbackTile;
      const int64_t gj = j0 + bj, gbk = k0 + bk;
      float b = 0.0f;
      if (gj < N && gbk < K) b = to_float(trans_b ? B[gj * ldb + gbk] : B[gbk * ldb + gj]);
      b_tile[bk][bj] = b;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kFallbackTileK; k++) {
      float a[kFallbackSub], b[kFallbackSub];
#pragma unroll
      for (int r = 0; r < kFallbackSub; r++)
        a[r] = a_tile[k][ty + kFallbackLanes * r];
#pragma unroll
      for (int c = 0; c < kFallbackSub; c++)
        b[c] = b_tile[k][tx + kFallbackLanes * c];
#pragma unroll
      for (int r = 0; r < kFallbackSub; r++)
#pragma unroll
        for (int c = 0; c < kFallbackSub; c++)
          acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
    __syncthreads();  // the tiles are reloaded next stage
  }
#pragma unroll
  for (int r = 0; r < kFallbackSub; r++) {
    const int64_t i = i0 + ty + kFallbackLanes * r;
#pragma unroll
    for (int c = 0; c < kFallbackSub; c++) {
      const int64_t j = j0 + tx + kFallbackLanes * c;
      if (i >= M || j >= N) continue;
      float v = alpha * acc[r][c];
      if (beta != 0.0f) v += beta * to_float(c_in[i * ldc + j]);  // C is not read when beta == 0
      if (bias) v += to_float(bias[j]);
      C[i * ldc + j] = from_float<DC>(v);
    }
  }
}

template <class TA, class TB, class TC>
void gemm_fallback(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, const TC* c_in,
                   TC* C, int64_t ldc, const cuda_gemm_extras<TC>& e, cudaStream_t stream) {
  const dim3 grid = grid_dim(ceil_div(M, kFallbackTile), ceil_div(N, kFallbackTile), e.batch);
  gemm_fallback_kernel<<<grid, kFallbackThreads, 0, stream>>>(
      trans_a, trans_b, M, N, K, alpha, dev(A), lda, e.stride_a, dev(B), ldb, e.stride_b, beta,
      dev(c_in), dev(C), ldc, e.stride_c, dev(e.bias));
  CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------- bias gradient

constexpr int kBiasChannels = 32;        // channels per block (threadIdx.x)
constexpr int kBiasRowLanes = 16;        // rows summed side by side (threadIdx.y)
constexpr int64_t kBiasGroupRows = 256;  // rows per group when partial sums have scratch
constexpr int64_t kBiasMaxGroups = 65535;
constexpr int kBiasFinishThreads = 256;

// Sum of dout[n][c] over rows [row0, row1) for the block's 32 channels: lane
// y sums rows row0 + y, row0 + y + 16, ..., then the lanes' sums are added in
// lane order. Valid in threads with threadIdx.y == 0; all threads must call it.
template <class DT>
__device__ float block_column_sum(const DT* dout, int64_t OC, int64_t c, int64_t row0,
                                  int64_t row1) {
  __shared__ float lane_sums[kBiasRowLanes][kBiasChannels];
  float s = 0.0f;
  if (c < OC)
    for (int64_t n = row0 + threadIdx.y; n < row1; n += kBiasRowLanes)
      s += to_float(dout[n * OC + c]);
  lane_sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  float sum = 0.0f;
  if (threadIdx.y == 0)
    for (int y = 0; y < kBiasRowLanes; y++)
      sum += lane_sums[y][threadIdx.x];
  return sum;
}

// dbias[c] += the sum over all N rows, in one block per 32 channels.
template <class DT, class DG>
__global__ void bias_backward_direct_kernel(DG* dbias, const DT* dout, int64_t N, int64_t OC) {
  const int64_t c = blockIdx.x * int64_t{kBiasChannels} + threadIdx.x;
  const float sum = block_column_sum(dout, OC, c, 0, N);
  if (threadIdx.y == 0 && c < OC) dbias[c] = from_float<DG>(to_float(dbias[c]) + sum);
}

// partial[g][c] = the sum over rows of group g = blockIdx.y.
template <class DT>
__global__ void bias_backward_partial_kernel(float* partial, const DT* dout, int64_t N, int64_t OC,
                                             int64_t group_rows) {
  const int64_t c = blockIdx.x * int64_t{kBiasChannels} + threadIdx.x;
  const int64_t row0 = blockIdx.y * group_rows, row1 = min(N, row0 + group_rows);
  const float sum = block_column_sum(dout, OC, c, row0, row1);
  if (threadIdx.y == 0 && c < OC) partial[blockIdx.y * OC + c] = sum;
}

// dbias[c] += the groups' partial sums, added in group order.
template <class DG>
__global__ void bias_backward_finish_kernel(DG* dbias, const float* partial, int64_t groups,
                                            int64_t OC) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= OC) return;
  float sum = 0.0f;
  for (int64_t g = 0; g < groups; g++)
    sum += partial[g * OC + c];
  dbias[c] = from_float<DG>(to_float(dbias[c]) + sum);
}

}  // namespace

// ---------------------------------------------------------------- launchers

namespace {

// Whether cuBLASLt can take the GEMM (types, K, pointer alignments) with
// extras' bias and epilogue pointers. Biases and aux matrices are used as
// everyone uses them: of the inputs' type (so D's too) and 16-byte aligned
// (smaller alignments have been seen to fail); aux_ld a multiple of 8 as
// CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD requires. K == 0 (C = beta C + bias)
// needs no product.
template <class TA, class TB, class TC>
bool lt_takes(int64_t K, const cuda_gemm_extras<TC>& e) {
  auto aligned = [](const void* p) { return alignment_bytes(p, 0, 0) >= 16; };
  if (!lt_supported<TA, TB, TC> || K == 0) return false;
  if (e.bias && !(std::is_same_v<TA, TC> && aligned(e.bias))) return false;
  switch (e.epilogue) {
    case gemm_epilogue::none:
      return true;
    case gemm_epilogue::gelu_aux:
    case gemm_epilogue::dgelu:
      return std::is_same_v<TA, TC> && aligned(e.aux) && e.aux_ld % 8 == 0;
    case gemm_epilogue::bgrad_b:
      return aligned(e.bias_grad);
  }
  return false;
}

// The GEMM with extras' epilogue on cuBLASLt (lt_takes holds): false, with
// nothing enqueued, when the plan's epilogue has no algorithm.
template <class TA, class TB, class TC>
bool lt_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const TA* A,
             int64_t lda, const TB* B, int64_t ldb, float beta, const TC* c_in, TC* C, int64_t ldc,
             gpu_exec& g, const cuda_gemm_extras<TC>& extras) {
  if (g.lt == nullptr || g.gemms == nullptr)
    throw std::invalid_argument("cuda_gemm: gpu_exec has no cuBLASLt handle or plan cache");
  const int64_t sa = sizeof(TA), sb = sizeof(TB), sc = sizeof(TC);
  const bool batched = extras.batch > 1;
  const bool with_aux =
      extras.epilogue == gemm_epilogue::gelu_aux || extras.epilogue == gemm_epilogue::dgelu;
  epilogue_pointers ptrs;
  ptrs.bias = extras.epilogue == gemm_epilogue::bgrad_b ? static_cast<const void*>(extras.bias_grad)
                                                        : static_cast<const void*>(extras.bias);
  ptrs.aux = with_aux ? extras.aux : nullptr;
  gpu_gemm_key key{};
  key.trans_a = trans_a;
  key.trans_b = trans_b;
  key.M = M;
  key.N = N;
  key.K = K;
  key.lda = lda;
  key.ldb = ldb;
  key.ldc = ldc;
  key.type_a = lt_type<TA>::value;
  key.type_b = lt_type<TB>::value;
  key.type_c = lt_type<TC>::value;
  key.bias = extras.bias != nullptr;
  key.epilogue = static_cast<int64_t>(extras.epilogue);
  key.aux_ld = with_aux ? extras.aux_ld : 0;
  key.batch = extras.batch;
  key.stride_a = batched ? extras.stride_a : 0;
  key.stride_b = batched ? extras.stride_b : 0;
  key.stride_c = batched ? extras.stride_c : 0;
  key.align_a = alignment_bytes(A, lda * sa, key.stride_a * sa);
  key.align_b = alignment_bytes(B, ldb * sb, key.stride_b * sb);
  key.align_c_in = alignment_bytes(c_in, ldc * sc, key.stride_c * sc);
  key.align_c = alignment_bytes(C, ldc * sc, key.stride_c * sc);
  key.align_bias = ptrs.bias ? alignment_bytes(ptrs.bias, 0, 0) : 0;
  key.align_aux = ptrs.aux ? alignment_bytes(ptrs.aux, key.aux_ld * sc, 0) : 0;
  key.workspace_bytes = g.lt_workspace ? g.lt_workspace_bytes : 0;

  std::lock_guard<std::mutex> lock(g.gemms->mutex);
  gpu_gemm_plan& plan = find_plan(*g.gemms, key, ptrs, g.lt);
  if (!plan.available) return false;
  set_epilogue_pointers(plan.desc, ptrs);
  CUBLAS_CHECK(cublasLtMatmul(g.lt, plan.desc, &alpha, B, plan.lt_a, A, plan.lt_b, &beta, c_in,
                              plan.lt_c, C, plan.lt_c, &plan.algo, g.lt_workspace,
                              static_cast<size_t>(key.workspace_bytes), g.stream));
  return true;
}

// C = alpha op(A) op(B) + beta c_in (+ bias) without an epilogue: cuBLASLt
// where it takes it, else the tiled kernel.
template <class TA, class TB, class TC>
void plain_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, const TC* c_in,
                TC* C, int64_t ldc, gpu_exec& g, cuda_gemm_extras<TC> extras) {
  extras.epilogue = gemm_epilogue::none;
  if (M == 0) return;
  if (lt_takes<TA, TB, TC>(K, extras) &&
      lt_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, g, extras))
    return;
  gemm_fallback(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, extras,
                g.stream);
}

}  // namespace

template <class TA, class TB, class TC>
void cuda_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C, int64_t ldc,
               gpu_exec& g, const cuda_gemm_extras<TC>& extras) {
  check_gemm_args(trans_a, trans_b, M, N, K, alpha, lda, ldb, beta, ldc, extras);
  if (N == 0 || extras.batch == 0) return;
  const TC* c_in = extras.c_in != nullptr && beta != 0.0f ? extras.c_in : C;
  if (M != 0 && extras.epilogue != gemm_epilogue::none && lt_takes<TA, TB, TC>(K, extras) &&
      lt_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, g, extras))
    return;
  // No epilogue, or the same with separate kernels (ldc == aux_ld == N for GELU's).
  switch (extras.epilogue) {
    case gemm_epilogue::none:
      return plain_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, g,
                        extras);
    case gemm_epilogue::gelu_aux:
      plain_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, extras.aux, extras.aux,
                 ldc, g, extras);
      return gelu_forward(C, static_cast<const TC*>(extras.aux), M * N, g.stream);
    case gemm_epilogue::dgelu:
      plain_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, g, extras);
      return gelu_backward(C, static_cast<const TC*>(extras.aux), static_cast<const TC*>(C), M * N,
                           g.stream);
    case gemm_epilogue::bgrad_b:
      plain_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, c_in, C, ldc, g, extras);
      CUDA_CHECK(cudaMemsetAsync(extras.bias_grad, 0, N * sizeof(float), g.stream));
      return cuda_gemm_bias_backward(extras.bias_grad, B, K, N, extras.scratch,
                                     extras.scratch_floats, g.stream);
  }
}

template <class T, class G>
void cuda_gemm_bias_backward(G* dbias, const T* dout, int64_t N, int64_t OC, float* scratch,
                             int64_t scratch_floats, cudaStream_t stream) {
  if (N == 0 || OC == 0) return;
  const int64_t channel_blocks = ceil_div(OC, kBiasChannels);
  const dim3 block(kBiasChannels, kBiasRowLanes);
  // Row groups summed by separate blocks into scratch, then added per channel.
  int64_t groups = 0;
  if (scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0)
    groups = std::min({scratch_floats / OC, ceil_div(N, kBiasGroupRows), kBiasMaxGroups});
  if (groups < 2) {
    bias_backward_direct_kernel<<<grid_dim(channel_blocks), block, 0, stream>>>(dev(dbias),
                                                                                dev(dout), N, OC);
    CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t group_rows = ceil_div(N, groups);
  groups = ceil_div(N, group_rows);  // no empty group
  bias_backward_partial_kernel<<<grid_dim(channel_blocks, groups), block, 0, stream>>>(
      scratch, dev(dout), N, OC, group_rows);
  CUDA_CHECK(cudaGetLastError());
  bias_backward_finish_kernel<<<grid_dim(ceil_div(OC, kBiasFinishThreads)), kBiasFinishThreads, 0,
                                stream>>>(dev(dbias), scratch, groups, OC);
  CUDA_CHECK(cudaGetLastError());
}

#define CUDA_GEMM_INSTANTIATE(TA, TB, TC)                                                          \
  template void cuda_gemm<TA, TB, TC>(bool, bool, int64_t, int64_t, int64_t, float, const TA*,     \
                                      int64_t, const TB*, int64_t, float, TC*, int64_t, gpu_exec&, \
                                      const cuda_gemm_extras<TC>&);
// Every combination of fp32 with one 16-bit type (bf16 and fp16 do not mix:
// runtime/dtype_pairs.h).
#define CUDA_GEMM_INSTANTIATE_WITH(H)    \
  CUDA_GEMM_INSTANTIATE(float, float, H) \
  CUDA_GEMM_INSTANTIATE(float, H, float) \
  CUDA_GEMM_INSTANTIATE(float, H, H)     \
  CUDA_GEMM_INSTANTIATE(H, float, float) \
  CUDA_GEMM_INSTANTIATE(H, float, H)     \
  CUDA_GEMM_INSTANTIATE(H, H, float)     \
  CUDA_GEMM_INSTANTIATE(H, H, H)
CUDA_GEMM_INSTANTIATE(float, float, float)
FSDPGEN_FOR_EACH_HALF_DTYPE(CUDA_GEMM_INSTANTIATE_WITH)

#define CUDA_GEMM_BIAS_INSTANTIATE(T, G)                                                       \
  template void cuda_gemm_bias_backward<T, G>(G*, const T*, int64_t, int64_t, float*, int64_t, \
                                              cudaStream_t);
FSDPGEN_FOR_EACH_DTYPE_PAIR(CUDA_GEMM_BIAS_INSTANTIATE)
