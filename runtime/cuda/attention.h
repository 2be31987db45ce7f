// attention (CUDA): causal multi-head self-attention, forward and backward,
// two ways. Materialized probabilities, computing what attention_forward and
// attention_backward of runtime/cpu/kernels.h compute, in the same layouts:
// products on cuda_gemm (runtime/cuda/gemm.h), softmax and its backward in
// fp32 kernels, a warp per (T)-row. Flash (fused, nothing of size T x T
// stored), computing what attention_forward_flash and
// attention_backward_flash compute. Plain C++; kernels in attention.cu
// (materialized) and attention_flash.cu (flash).
//
// qkv (N, 3C) holds q | k | v, each split into H heads of hs = C/H; probs
// (B, H, T, T) are the softmax probabilities (row t holds zeros after column
// t); out (N, C) is the heads' outputs concatenated. Scores are scaled by
// 1/sqrt(hs) in the GEMM and stored (as T) in probs before the softmax, as on
// CPU. Enqueued on g.stream; nothing allocates or synchronizes.
#pragma once

#include <cstdint>

#include "runtime/attention_options.h"
#include "runtime/cuda/exec.h"
#include "runtime/dtype.h"
#include "runtime/limits.h"

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

// Flash attention: a block per 32 queries of a head holds their q in shared
// memory and runs over the key tiles at or below the diagonal (the tiles
// above it are skipped, the diagonal one masked), keeping each query's
// running max, sum of exponentials and output in fp32 (online softmax); it
// writes out and lse (B, H, T), fp32, the log-sum-exp of each query's scaled
// scores. Products on CUDA cores in fp32 (no tensor cores yet). Inputs
// float, bf16 or fp16; head size C/H at most kCudaAttentionFlashMaxHeadSize
// (runtime/limits.h; std::invalid_argument otherwise, before anything is
// enqueued).
template <class T>
void cuda_attention_forward_flash(T* out,        // (N, C)
                                  float* lse,    // (B, H, T)
                                  const T* qkv,  // (N, 3C)
                                  int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);
// dqkv (N, 3C) overwritten, from dout and the forward's out and lse, the
// probabilities recomputed from q, k and lse (FlashAttention-2's backward).
// Three kernels: delta = rowsum(dout * out) (B, H, T) into the fp32 scratch
// `delta`; dk and dv per tile of 32 keys, over the query tiles from the
// diagonal on; dq per tile of 32 queries, over the key tiles up to the
// diagonal. Every output value is written once by one thread after a sum in
// a fixed order: no atomics, deterministic (for that, the products q.k and
// dout.v are computed twice, once per pass). cudnn_attention.h computes the
// same flash forward and backward through cuDNN, in 16-bit types.
template <class T>
void cuda_attention_backward_flash(T* dqkv,           // (N, 3C)
                                   float* delta,      // (B, H, T) scratch
                                   const T* dout,     // (N, C)
                                   const T* qkv,      // (N, 3C)
                                   const T* out,      // (N, C)
                                   const float* lse,  // (B, H, T)
                                   int64_t B, int64_t T_, int64_t C, int64_t H, gpu_exec& g);

// Grouped-query attention (llama) on the same flash kernels, as
// runtime/cpu/kernels.h's attention_gqa_forward/backward: q (N, H*hs), k and v
// (N, KV_heads*hs) arrays of their own, query head h reading kv head h / (H
// / KV_heads), k and v never repeated; dk and dv sum over the query heads of
// their group in head order (a block per kv head and key tile). The options
// (runtime/attention_options.h) as on the CPU: with a window W query t
// attends keys u in [t - W + 1, t] only (key tiles wholly outside it are
// skipped, partial ones masked); scores are softcap_of(scale q . k); lse is
// of those; the backward multiplies each score's gradient by its
// softcap_slope. A negative window, or a negative or non-finite scale or
// softcap: std::invalid_argument before anything is enqueued.
template <class T>
void cuda_attention_gqa_forward(T* out,      // (N, H*hs)
                                float* lse,  // (B, H, T)
                                const T* q,  // (N, H*hs)
                                const T* k,  // (N, KV_heads*hs)
                                const T* v,  // (N, KV_heads*hs)
                                int64_t B, int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                                gpu_exec& g, const attention_options& o = {});
template <class T>
void cuda_attention_gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q,
                                 const T* k, const T* v, const T* out, const float* lse, int64_t B,
                                 int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, gpu_exec& g,
                                 const attention_options& o = {});
