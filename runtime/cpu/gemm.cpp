// gemm: row-major GEMM on OpenBLAS for every float/bf16 and float/fp16
// operand combination; 16-bit operands are widened tile by tile into the
// caller's workspace.
#include "runtime/cpu/gemm.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "runtime/dtype_pairs.h"

namespace {

// Tiles smaller than this (per dimension, when the matrix is that large) make
// sgemm call overhead dominate; a workspace that cannot hold them is an error.
constexpr int64_t kGemmMinTile = 16;
// Largest tile edge tried first.
constexpr int64_t kGemmMaxTile = 4096;

// 16-bit storage (bf16 or fp16): widened to fp32 around sgemm.
template <class T>
constexpr bool is_narrow = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

struct gemm_tile {
  int64_t m, n, k;
};

// Floats of workspace a tile needs: a widened A tile, B tile and C tile for
// each operand stored in 16 bits (fp32 operands are used in place).
template <class TA, class TB, class TC>
int64_t gemm_tile_floats(const gemm_tile& t) {
  return (is_narrow<TA> ? t.m * t.k : 0) + (is_narrow<TB> ? t.k * t.n : 0) +
         (is_narrow<TC> ? t.m * t.n : 0);
}

// The largest square-ish tile (edges clamped to the matrix) that fits ws.
template <class TA, class TB, class TC>
gemm_tile gemm_choose_tile(int64_t M, int64_t N, int64_t K, const gemm_workspace& ws) {
  const gemm_tile min_tile{std::min(M, kGemmMinTile), std::min(N, kGemmMinTile),
                           std::min(K, kGemmMinTile)};
  const int64_t min_floats = gemm_tile_floats<TA, TB, TC>(min_tile);
  if (ws.data == nullptr || ws.floats < min_floats)
    throw std::runtime_error(
        fmt::format("gemm: workspace of {} floats is too small for a 16-bit GEMM of M={} N={} K={} "
                    "(a {}x{}x{} tile needs {} floats; kCpuGemmWorkspaceBytes is {})",
                    ws.data == nullptr ? 0 : ws.floats, M, N, K, min_tile.m, min_tile.n, min_tile.k,
                    min_floats, kCpuGemmWorkspaceBytes));
  for (int64_t s = kGemmMaxTile; s > kGemmMinTile; s -= s > 256 ? 64 : 16) {
    const gemm_tile t{std::min(M, s), std::min(N, s), std::min(K, s)};
    if (gemm_tile_floats<TA, TB, TC>(t) <= ws.floats) return t;
  }
  return min_tile;
}

// dst (rows, cols, leading dim cols) = src (rows, cols, leading dim ld) in fp32.
// Conversions run on the calling thread: they cost ~1/tile of the sgemm's
// work, and an OpenMP team spinning beside OpenBLAS's threads slows sgemm ~10x.
template <class T>
void gemm_widen(float* dst, const T* src, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      dst[r * cols + c] = to_float(src[r * ld + c]);
}

// dst (rows, cols, leading dim ld) = src (rows, cols, leading dim cols) rounded to T.
template <class T>
void gemm_narrow(T* dst, int64_t ld, const float* src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      dst[r * ld + c] = from_float<T>(src[r * cols + c]);
}

// A stored (rows, cols) sub-matrix of an operand: fp32 in place, or widened
// into `buf` (then its leading dimension is `cols`).
template <class T>
const float* gemm_operand(const T* X, int64_t ldx, int64_t row0, int64_t col0, int64_t rows,
                          int64_t cols, float* buf, int64_t* ld) {
  if constexpr (is_narrow<T>) {
    gemm_widen(buf, X + row0 * ldx + col0, ldx, rows, cols);
    *ld = cols;
    return buf;
  } else {
    *ld = ldx;
    return X + row0 * ldx + col0;
  }
}

}  // namespace

template <class TA, class TB, class TC>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const TA* A,
          int64_t lda, const TB* B, int64_t ldb, float beta, TC* C, int64_t ldc,
          const gemm_workspace& ws) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta * C, which BLAS leaves to the implementation here
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++)
        C[i * ldc + j] = from_float<TC>(beta == 0.0f ? 0.0f : beta * to_float(C[i * ldc + j]));
    return;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (!is_narrow<TA> && !is_narrow<TB> && !is_narrow<TC>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  } else {
    const gemm_tile t = gemm_choose_tile<TA, TB, TC>(M, N, K, ws);
    float* a_buf = ws.data;
    float* b_buf = a_buf + (is_narrow<TA> ? t.m * t.k : 0);
    float* c_buf = b_buf + (is_narrow<TB> ? t.k * t.n : 0);
    for (int64_t i0 = 0; i0 < M; i0 += t.m) {
      const int64_t m = std::min(t.m, M - i0);
      for (int64_t j0 = 0; j0 < N; j0 += t.n) {
        const int64_t n = std::min(t.n, N - j0);
        // The fp32 C tile (m, n): C itself when TC is fp32, else widened.
        float* c;
        int64_t ldc_tile;
        if constexpr (is_narrow<TC>) {
          c = c_buf;
          ldc_tile = n;
          if (beta != 0.0f) gemm_widen(c, C + i0 * ldc + j0, ldc, m, n);
        } else {
          c = C + i0 * ldc + j0;
          ldc_tile = ldc;
        }
        for (int64_t k0 = 0; k0 < K; k0 += t.k) {
          const int64_t k = std::min(t.k, K - k0);
          int64_t lda_tile, ldb_tile;
          // op(A) tile (m, k) is A[i0.., k0..] (m, k), or A[k0.., i0..] (k, m) when transposed.
          const float* a = trans_a ? gemm_operand(A, lda, k0, i0, k, m, a_buf, &lda_tile)
                                   : gemm_operand(A, lda, i0, k0, m, k, a_buf, &lda_tile);
          // op(B) tile (k, n) is B[k0.., j0..] (k, n), or B[j0.., k0..] (n, k) when transposed.
          const float* b = trans_b ? gemm_operand(B, ldb, j0, k0, n, k, b_buf, &ldb_tile)
                                   : gemm_operand(B, ldb, k0, j0, k, n, b_buf, &ldb_tile);
          cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda_tile, b, ldb_tile,
                      k0 == 0 ? beta : 1.0f, c, ldc_tile);
        }
        if constexpr (is_narrow<TC>) gemm_narrow(C + i0 * ldc + j0, ldc, c, m, n);
      }
    }
  }
}

#define GEMM_INSTANTIATE(TA, TB, TC)                                                               \
  template void gemm<TA, TB, TC>(bool, bool, int64_t, int64_t, int64_t, float, const TA*, int64_t, \
                                 const TB*, int64_t, float, TC*, int64_t, const gemm_workspace&);
// Every combination of fp32 with one 16-bit type (bf16 and fp16 do not mix:
// runtime/dtype_pairs.h).
#define GEMM_INSTANTIATE_WITH(H)    \
  GEMM_INSTANTIATE(float, float, H) \
  GEMM_INSTANTIATE(float, H, float) \
  GEMM_INSTANTIATE(float, H, H)     \
  GEMM_INSTANTIATE(H, float, float) \
  GEMM_INSTANTIATE(H, float, H)     \
  GEMM_INSTANTIATE(H, H, float)     \
  GEMM_INSTANTIATE(H, H, H)
GEMM_INSTANTIATE(float, float, float)
FSDPGEN_FOR_EACH_HALF_DTYPE(GEMM_INSTANTIATE_WITH)
