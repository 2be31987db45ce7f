// gemm_plan (CUDA): cuda_gemm's cuBLASLt plans, their key and their cache;
// internal to gemm.cu (which looks plans up and runs them) and gemm_plan.cpp
// (which makes them). Plain C++.
//
// Row-major to cuBLASLt's column-major: a row-major (R x S) matrix with
// leading dim ld is the column-major (S x R) matrix with the same ld, its
// transpose. So row-major C = op(A) op(B) is column-major C^T = op(B)^T
// op(A)^T: cuBLASLt's A is our B, its B is our A, its m is our N and its n
// our M; the transposes keep their meaning per operand.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "runtime/cuda/gemm_epilogue.h"

// Everything a cuBLASLt plan depends on. All int64_t, so that keys compare
// bytewise (no padding).
struct gpu_gemm_key {
  int64_t trans_a, trans_b;
  int64_t M, N, K, lda, ldb, ldc;
  int64_t type_a, type_b, type_c;  // cudaDataType_t
  int64_t bias;                    // 1: a bias is added (BIAS or GELU_AUX_BIAS)
  int64_t epilogue;                // gemm_epilogue
  int64_t aux_ld;
  int64_t batch, stride_a, stride_b, stride_c;
  // Bytes (powers of two, at most 256) dividing each pointer, its leading
  // dimension and batch stride: cuBLASLt picks kernels by alignment.
  int64_t align_a, align_b, align_c_in, align_c, align_bias, align_aux;
  int64_t workspace_bytes;
};
static_assert(std::has_unique_object_representations_v<gpu_gemm_key>,
              "gpu_gemm_key is compared bytewise");

// One GEMM's cuBLASLt descriptors and algorithm. lt_a describes cuBLASLt's
// A (our B), lt_b its B (our A), lt_c both its C and D (our C, or c_in).
struct gpu_gemm_plan {
  gpu_gemm_key key{};
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  // False for an epilogue cuBLASLt has no algorithm for (cuda_gemm then runs
  // separate kernels); the heuristic is not asked again.
  bool available = true;

  gpu_gemm_plan() = default;
  gpu_gemm_plan(const gpu_gemm_plan&) = delete;
  gpu_gemm_plan& operator=(const gpu_gemm_plan&) = delete;
  // Statuses are ignored: a destructor cannot throw, and these fail only on
  // invalid handles.
  ~gpu_gemm_plan() {
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// Plans are few (one per distinct GEMM of a model: a few dozen), so lookup
// is a linear scan. The mutex covers lookup, insertion and the per-call
// bias pointer a plan's descriptor carries, should two threads issue GEMMs.
struct gpu_gemm_cache {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<gpu_gemm_plan>> plans;
};

// The call's pointers that the descriptor carries: the bias (or bias
// gradient) and the aux matrix, set on each call; the heuristic reads their
// alignment.
struct epilogue_pointers {
  const void* bias = nullptr;
  const void* aux = nullptr;
};

// The epilogue's name in messages: "no", "gelu_aux", "dgelu" or "bgrad_b".
const char* epilogue_name(gemm_epilogue e);

// Sets the descriptor's bias (or bias gradient) and aux pointers, those of
// ptrs that are not null.
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const epilogue_pointers& ptrs);

// The cached plan for key, made on first use. The caller holds the mutex.
gpu_gemm_plan& find_plan(gpu_gemm_cache& cache, const gpu_gemm_key& key,
                         const epilogue_pointers& ptrs, cublasLtHandle_t lt);
