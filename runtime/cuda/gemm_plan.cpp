// gemm_plan (CUDA): cuda_gemm's cuBLASLt plans and their cache (see
// gemm_plan.h): a key's descriptors and layouts, the heuristic's algorithm
// for them, and the cache's lookup (the cache's create, destroy and counts are
// gemm.h's, in gemm.cu). Plain C++.
#include "runtime/cuda/gemm_plan.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/cuda/cublas_check.h"

const char* epilogue_name(gemm_epilogue e) {
  switch (e) {
    case gemm_epilogue::none:
      return "no";
    case gemm_epilogue::gelu_aux:
      return "gelu_aux";
    case gemm_epilogue::dgelu:
      return "dgelu";
    case gemm_epilogue::bgrad_b:
      return "bgrad_b";
  }
  return "?";
}

namespace {

const char* cuda_type_name(int64_t t) {
  return t == CUDA_R_32F ? "fp32" : t == CUDA_R_16BF ? "bf16" : t == CUDA_R_16F ? "fp16" : "?";
}

std::string describe(const gpu_gemm_key& k) {
  auto s = [](int64_t x) { return std::to_string(x); };
  std::string d =
      "M=" + s(k.M) + " N=" + s(k.N) + " K=" + s(k.K) + " trans_a=" + s(k.trans_a) +
      " trans_b=" + s(k.trans_b) + " lda=" + s(k.lda) + " ldb=" + s(k.ldb) + " ldc=" + s(k.ldc) +
      ", " + cuda_type_name(k.type_a) + " x " + cuda_type_name(k.type_b) + " -> " +
      cuda_type_name(k.type_c) + (k.bias ? ", bias epilogue" : "") +
      (k.epilogue != 0 ? std::string(", ") + epilogue_name(static_cast<gemm_epilogue>(k.epilogue)) +
                             " epilogue (aux_ld " + s(k.aux_ld) + ")"
                       : std::string());
  if (k.batch != 1)
    d += ", batch " + s(k.batch) + " (strides " + s(k.stride_a) + ", " + s(k.stride_b) + ", " +
         s(k.stride_c) + ")";
  d += ", alignments A " + s(k.align_a) + " B " + s(k.align_b) + " C " + s(k.align_c_in) + " D " +
       s(k.align_c) + (k.align_bias ? " bias " + s(k.align_bias) : "") +
       (k.align_aux ? " aux " + s(k.align_aux) : "") + " bytes, workspace " + s(k.workspace_bytes) +
       " bytes";
  return d;
}

// ---------------------------------------------------------------- cuBLASLt plans

template <class V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}

template <class V>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
              const V& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

// *layout = a column-major (rows x cols) layout with leading dim ld, batched
// when batch > 1. Assigned before the attributes are set, so that the plan
// owning *layout frees it if setting them throws.
void make_layout(cublasLtMatrixLayout_t* layout, int64_t type, int64_t rows, int64_t cols,
                 int64_t ld, int64_t batch, int64_t stride) {
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout, static_cast<cudaDataType_t>(type),
                                          static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                          ld));
  if (batch == 1) return;
  const int32_t count = static_cast<int32_t>(batch);
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof count));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
}

struct preference_guard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~preference_guard() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

// cuBLASLt's epilogue for key.
uint32_t lt_epilogue(const gpu_gemm_key& k) {
  switch (static_cast<gemm_epilogue>(k.epilogue)) {
    case gemm_epilogue::none:
      return k.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case gemm_epilogue::gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case gemm_epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case gemm_epilogue::bgrad_b:
      return CUBLASLT_EPILOGUE_BGRADA;  // cuBLASLt's A is our B
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const epilogue_pointers& ptrs) {
  if (ptrs.bias) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptrs.bias);
  if (ptrs.aux) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, ptrs.aux);
}

namespace {

// A plan for key: descriptors, then the heuristic's best algorithm for them.
// One with an epilogue the heuristic has no algorithm for is marked unavailable.
std::unique_ptr<gpu_gemm_plan> make_plan(const gpu_gemm_key& k, const epilogue_pointers& ptrs,
                                         cublasLtHandle_t lt) {
  auto plan = std::make_unique<gpu_gemm_plan>();
  plan->key = k;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const int32_t op_b = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(k));
  set_epilogue_pointers(plan->desc, ptrs);
  if (ptrs.aux) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, k.aux_ld);
  // Column-major shapes: our B is (N x K) stored, or (K x N) when trans_b;
  // our A is (K x M), or (M x K) when trans_a; C is (N x M).
  make_layout(&plan->lt_a, k.type_b, k.trans_b ? k.K : k.N, k.trans_b ? k.N : k.K, k.ldb, k.batch,
              k.stride_b);
  make_layout(&plan->lt_b, k.type_a, k.trans_a ? k.M : k.K, k.trans_a ? k.K : k.M, k.lda, k.batch,
              k.stride_a);
  make_layout(&plan->lt_c, k.type_c, k.N, k.M, k.ldc, k.batch, k.stride_c);

  preference_guard p;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&p.pref));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
           static_cast<uint64_t>(k.workspace_bytes));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<uint32_t>(k.align_b));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<uint32_t>(k.align_a));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<uint32_t>(k.align_c_in));
  set_pref(p.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<uint32_t>(k.align_c));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      lt, plan->desc, plan->lt_a, plan->lt_b, plan->lt_c, plan->lt_c, p.pref, 1, &result, &found);
  const bool none =
      status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0);
  if (none && k.epilogue != 0) {
    plan->available = false;
    return plan;
  }
  if (none)
    throw std::runtime_error("cuda_gemm: cuBLASLt has no algorithm for " + describe(k) +
                             " on this GPU (cublasLtMatmulAlgoGetHeuristic found none)");
  if (status != CUBLAS_STATUS_SUCCESS)
    cublas_fail(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  plan->algo = result.algo;
  return plan;
}

}  // namespace

gpu_gemm_plan& find_plan(gpu_gemm_cache& cache, const gpu_gemm_key& key,
                         const epilogue_pointers& ptrs, cublasLtHandle_t lt) {
  for (const auto& plan : cache.plans)
    if (std::memcmp(&plan->key, &key, sizeof key) == 0) return *plan;
  cache.plans.push_back(make_plan(key, ptrs, lt));
  return *cache.plans.back();
}
