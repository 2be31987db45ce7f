// attention (CUDA): causal multi-head self-attention with materialized
// probabilities, forward and backward, computing what attention_forward and
// attention_backward of runtime/kernels.h compute, in the same layouts:
// products on cuda_gemm (runtime/cuda/gemm.h), softmax and its backward in
// fp32 kernels, a warp per (T)-row. Plain C++; kernels in attention.cu.
//
// qkv (N, 3C) holds q | k | v, each split into H heads of hs = C/H; probs
// (B, H, T, T) are the softmax probabilities (row t holds zeros after column
// t); out (N, C) is the heads' outputs concatenated. Scores are scaled by
// 1/sqrt(hs) in the GEMM and stored (as T) in probs before the softmax, as on
// CPU. Enqueued on g.stream; nothing allocates or synchronizes.
#pragma once

#include <cstdint>

#include "runtime/cuda/exec.h"
#include "runtime/dtype.h"

template <class T>
void cuda_attention_forward(T* out,        // (N, C)
                            T* probs,      // (B, H, T, T)
                            const T* qkv,  // (N, 3C)
                            int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);
// dqkv (N, 3C) overwritten; dprobs (B, H, T, T) is scratch (it ends holding
// the scaled scores' gradient, stored as T, zeros above the diagonal).
template <class T>
void cuda_attention_backward(T* dqkv,         // (N, 3C)
                             T* dprobs,       // (B, H, T, T)
                             const T* dout,   // (N, C)
                             const T* qkv,    // (N, 3C)
                             const T* probs,  // (B, H, T, T)
                             int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);
