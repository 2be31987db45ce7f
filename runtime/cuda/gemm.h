// gemm (CUDA): row-major matrix products on the GPU with runtime/cpu/gemm.h's
// gemm() semantics, through cuBLASLt (fp32 compute, no TF32), plus what
// cuBLASLt can fuse: a bias epilogue, a separate C input (D = AB + C) and
// strided batches. The bias's backward (column sums) is here too. Plain C++
// (included by host code); kernels live in gemm.cu, cuBLASLt plans in
// gemm_plan.cpp.
//
// Each distinct GEMM (shape, transposes, types, epilogue, batch, pointer
// alignments) gets a plan the first time it runs: cuBLASLt descriptors and
// the algorithm cublasLtMatmulAlgoGetHeuristic picks within the workspace
// g.lt_workspace_bytes, kept in g.gemms. Later calls look the plan up and
// enqueue one cublasLtMatmul: no host allocation, nothing synchronizes, so a
// step whose GEMMs were planned in an eager run can be captured as a graph.
//
// Epilogues (gemm_epilogue) fuse GELU's forward and backward and a bias's
// gradient into the GEMM; each falls back to separate kernels where cuBLASLt
// has no algorithm for it, so a caller needs no second path.
//
// cuBLASLt multiplies fp32 x fp32 -> fp32, h x h -> h and h x h -> fp32 for
// a 16-bit h (bf16 or fp16), and adds a bias of the output's type when that
// is the inputs' type too. The other combinations gemm() accepts (mixed A/B,
// fp32 x fp32 -> h, a bias on h x h -> fp32 or one not 16-byte aligned), and
// K == 0, run on a plain tiled CUDA kernel with the same semantics: correct
// but several times slower than cuBLASLt. The gpt2 layers meet it only for
// fp32 activations with 16-bit gradients (dweight).
#pragma once

#include <cstdint>

#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/exec.h"
#include "runtime/cuda/gemm_epilogue.h"
#include "runtime/dtype.h"

// An empty plan cache, for one device; destroy frees the plans' descriptors.
gpu_gemm_cache* gpu_gemm_cache_create();
void gpu_gemm_cache_destroy(gpu_gemm_cache* cache);
// Plans the cache holds (tests check that repeated GEMMs reuse theirs).
int64_t gpu_gemm_cache_plans(const gpu_gemm_cache* cache);
// Plans with an epilogue cuBLASLt runs (not those it has no algorithm for).
int64_t gpu_gemm_cache_fused_plans(const gpu_gemm_cache* cache);

// What a GEMM may add to gemm()'s, all off by default.
template <class TC>
struct cuda_gemm_extras {
  // (N): added to every row of the result (cuBLASLt's BIAS epilogue), before
  // the one rounding to TC. Only with batch == 1.
  const TC* bias = nullptr;
  // The matrix beta scales when it is not C itself (same leading dimension
  // ldc and batch stride stride_c); C is then only written.
  const TC* c_in = nullptr;
  // Strided batch: product i reads A + i * stride_a, B + i * stride_b (and
  // c_in + i * stride_c) and writes C + i * stride_c; strides in elements.
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  gemm_epilogue epilogue = gemm_epilogue::none;
  // gelu_aux writes, dgelu reads GELU's input: (M x N), leading dim aux_ld.
  TC* aux = nullptr;
  int64_t aux_ld = 0;
  float* bias_grad = nullptr;  // bgrad_b's output (N)
  // Device floats the separate column sums of bgrad_b may use for partial
  // sums (cuda_gemm_bias_backward's scratch); not overlapping bias_grad.
  float* scratch = nullptr;
  int64_t scratch_floats = 0;
};

// C (M x N, leading dim ldc) = alpha * op(A) op(B) + beta * C, row-major,
// as gemm() of runtime/cpu/gemm.h: op(A) is M x K (A is K x M when trans_a),
// op(B) is K x N (B is N x K when trans_b); accumulation is fp32 and C is
// rounded to TC once. With beta == 0, C is not read (it may hold NaN).
// Enqueued on g.stream; g.lt, g.gemms and the workspace must be set.
template <class TA, class TB, class TC>
void cuda_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const TA* A, int64_t lda, const TB* B, int64_t ldb, float beta, TC* C, int64_t ldc,
               gpu_exec& g, const cuda_gemm_extras<TC>& extras = {});

// dbias (OC) += column sums of dout (N, OC): the gradient of a bias that
// cuda_gemm added, summed in fp32 in a fixed order and rounded to G once.
// scratch (device floats; nullptr for none) holds partial sums of row
// groups when it is 4-byte aligned and has room for at least two groups
// (2 * OC floats); it makes the sum far more parallel. Enqueued on stream.
template <class T, class G>
void cuda_gemm_bias_backward(G* dbias, const T* dout, int64_t N, int64_t OC, float* scratch,
                             int64_t scratch_floats, cudaStream_t stream);
