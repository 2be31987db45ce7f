// gemm_epilogue (CUDA): what cuda_gemm (runtime/cuda/gemm.h) may fuse into a
// GEMM, which the plans of runtime/cuda/gemm_plan.h key on.
#pragma once

#include <cstdint>

// What cuBLASLt's epilogue computes besides the product (and the bias), in
// row-major terms. Each needs alpha == 1 and batch == 1. Where cuBLASLt has
// no algorithm for one (an aux_ld not a multiple of 8, a pointer not 16-byte
// aligned, a type combination or GPU without it: the heuristic finds none),
// cuda_gemm computes the same with the plain GEMM and separate kernels.
enum class gemm_epilogue : int64_t {
  none,
  // aux = op(A) op(B) + bias rounded to TC (GELU's input, saved for its
  // backward) and C = gelu(op(A) op(B) + bias), tanh approximation as
  // runtime/cpu/kernels.h's gelu_forward, from the fp32 value (one rounding; the
  // separate kernels round aux first). cuBLASLt's GELU_AUX_BIAS. Needs bias,
  // beta == 0 and ldc == aux_ld == N.
  gelu_aux,
  // C = op(A) op(B) * gelu'(aux): GELU's backward (gelu_backward) from its
  // saved input aux, rounded once. cuBLASLt's DGELU. Needs beta == 0 and
  // ldc == aux_ld == N.
  dgelu,
  // bias_grad (N floats, overwritten) = sums over K of op(B), i.e. the column
  // sums of B (K x N): the gradient of a bias when B is the gradient of the
  // output it was added to. cuBLASLt's BGRADA (its A is our B). Needs TC =
  // float, !trans_b and ldb == N.
  bgrad_b,
};
