// gemm: row-major matrix products through OpenBLAS. fp32 operands go straight
// to cblas_sgemm; bf16 and fp16 operands are converted to fp32 tiles in the caller's
// workspace (Debian's OpenBLAS has no 16-bit GEMM), multiplied with sgemm and
// rounded back, so a 16-bit GEMM never allocates.
#pragma once

#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/gemm_workspace.h"
#include "runtime/limits.h"

// The workspace a 16-bit GEMM needs: runtime/limits.h's kCpuGemmWorkspaceBytes.

// C (M x N, leading dim ldc) = alpha * op(A) * op(B) + beta * C, row-major.
// op(A) is M x K (A is K x M when trans_a), op(B) is K x N (B is N x K when
// trans_b). TA/TB/TC may each be float or one 16-bit type (bf16 or fp16); accumulation is fp32.
template <class TA, class TB, class TC>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const TA* A,
          int64_t lda, const TB* B, int64_t ldb, float beta, TC* C, int64_t ldc,
          const gemm_workspace& ws);
