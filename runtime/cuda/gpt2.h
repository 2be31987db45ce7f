// gpt2 (CUDA): the family's layers on the GPU, composed from kernels.cuh,
// gemm.h and attention.h over the saved-activation, parameter and scratch
// layouts of runtime/gpt2.h (whose *_at functions are pointer arithmetic and
// work on device pointers). Each launcher computes what its CPU counterpart
// in runtime/cpu/gpt2.h computes, with the same buffers and the same contracts:
// scratch.dres holds d(out) on entry and d(input) on return, parameter
// gradients are accumulated (+=). Everything is enqueued on g.stream; nothing
// allocates or synchronizes. Plain C++; implementations in gpt2.cu.
//
// Differences in rounding only: a GEMM's bias and a following residual are
// fused into the GEMM (one rounding to T where the CPU rounds twice), and so
// are GELU's forward (gelu from the fp32 pre-activation; fc, its saved
// input, is the same rounded value as on CPU) and backward (d(fc) from the
// fp32 product, not its rounding to T) through cuBLASLt's epilogues.
#pragma once

#include <cstdint>

#include "runtime/cuda/exec.h"
#include "runtime/gpt2.h"

// Embedding: out = wte[tokens] + wpe.
template <class T>
void gpt2_embed_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const gpt2_dims& d, gpu_exec& g);
// dwte, dwpe += from s.dres; s.big is overwritten (the sort of positions by token).
template <class T, class G>
void gpt2_embed_backward(G* dwte, G* dwpe, const int32_t* tokens, const gpt2_backward_scratch<T>& s,
                         const gpt2_dims& d, gpu_exec& g);

// One block: reads s.input, fills the rest of s, writes out (N, C). out ==
// nullptr skips the last projection and residual: a recompute fills s only.
// `pieces` runs part of the block, as on the CPU (runtime/cpu/gpt2.h).
template <class T>
void gpt2_block_forward(T* out, const gpt2_block_params<T>& p, const gpt2_block_saved<T>& s,
                        const gpt2_dims& d, gpu_exec& g, block_pieces pieces = {});
// scratch.dres holds d(out) on entry and d(input) on return; grads +=;
// scratch.dtmp and scratch.big (and, with d.flash, scratch.delta) are
// overwritten. d.flash selects the flash attention kernels (and the saved
// slot's lse, attention.h), else the materialized ones (the slot's probs);
// with d.flash, 16-bit T and g.attention set, cuDNN's fused attention
// (cudnn_attention.h: same lse; scratch.delta then unused).
template <class T, class G>
void gpt2_block_backward(const gpt2_block_grads<G>& grads, const gpt2_block_params<T>& p,
                         const gpt2_block_saved<T>& s, const gpt2_backward_scratch<T>& scratch,
                         const gpt2_dims& d, gpu_exec& g, block_pieces pieces = {});

// Final norm and head with the loss: reads s.input, fills s; logits (N, Vp)
// end holding dloss_scale * d(loss sum)/d(logits), zero in the padded
// columns [V, Vp); losses (N) fp32 per token. dloss_scale is one device
// float, read when the kernel runs (a captured step replays with each step's
// value). head_w is (Vp, C), its padded rows zero (runtime/cpu/gpt2.h).
template <class T>
void gpt2_head_forward(T* logits, float* losses, const int32_t* targets, const T* lnf_w,
                       const T* lnf_b, const T* head_w, const gpt2_final_norm_saved<T>& s,
                       const gpt2_dims& d, const float* dloss_scale, gpu_exec& g);
// scratch.dres = d(input of the final norm) (overwritten); grads +=;
// scratch.dtmp and scratch.big are overwritten.
template <class T, class G>
void gpt2_head_backward(G* dlnf_w, G* dlnf_b, G* dhead_w, const T* lnf_w, const T* head_w,
                        const T* logits, const gpt2_final_norm_saved<T>& s,
                        const gpt2_backward_scratch<T>& scratch, const gpt2_dims& d, gpu_exec& g);
