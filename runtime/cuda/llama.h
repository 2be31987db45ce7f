// llama (CUDA): the family's layers on the GPU, composed from kernels.cuh,
// gemm.h and grouped-query attention (cuDNN's fused attention in 16 bits
// where the backend set it up, else attention.h's flash kernels) over the layouts of
// runtime/llama.h (whose *_at functions are pointer arithmetic and work on
// device pointers). Each launcher computes what its CPU counterpart in
// runtime/cpu/llama.h computes, with the same buffers and contracts; nn.Linear
// products on cuBLASLt (a residual added in the GEMM: one rounding to T where
// the CPU rounds once too). Everything is enqueued on g.stream; nothing
// allocates or synchronizes. Plain C++; implementations in llama.cu.
#pragma once

#include <cstdint>

#include "runtime/cuda/exec.h"
#include "runtime/llama.h"

template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d,
                         gpu_exec& g);
// dwte += from s.dres; s.big is overwritten (the sort of positions by token).
template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d, gpu_exec& g);

// `pieces` runs part of a block, as on the CPU (runtime/cpu/llama.h).
template <class T>
void llama_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                         const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                         block_pieces pieces = {});
template <class T, class G>
void llama_block_backward(const llama_block_grads<G>& grads, const llama_block_params<T>& p,
                          const llama_block_saved<T>& s, const llama_backward_scratch<T>& scratch,
                          const llama_rope& rope, const llama_dims& d, gpu_exec& g,
                          block_pieces pieces = {});

// dloss_scale: one device float, read when the kernel runs.
template <class T>
void llama_head_forward(T* logits, float* losses, const int32_t* targets, const T* norm_w,
                        const T* head_w, const llama_final_norm_saved<T>& s, const llama_dims& d,
                        const float* dloss_scale, gpu_exec& g);
template <class T, class G>
void llama_head_backward(G* dnorm_w, G* dhead_w, const T* norm_w, const T* head_w, const T* logits,
                         const llama_final_norm_saved<T>& s,
                         const llama_backward_scratch<T>& scratch, const llama_dims& d,
                         gpu_exec& g);
