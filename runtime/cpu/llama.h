// llama (CPU): the family's layers composed from runtime/cpu/kernels.h
// (RMSNorm, rotary positions, grouped-query flash attention, SwiGLU,
// nn.Linear GEMMs) over the tensors of runtime/llama.h. A generated step
// calls these with pointers into the arena; nothing here allocates.
#pragma once

#include <cstdint>

#include "runtime/block_pieces.h"
#include "runtime/cpu/gemm.h"
#include "runtime/llama.h"

// Embedding: out = wte[tokens] (N, C).
template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d);
// dwte[tokens[n]] += s.dres[n], in position order.
template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d);

// One block: reads s.input, fills the rest of s, writes out (N, C) (which may
// be the next layer's saved input). With qkv_bias each of q, k and v adds its
// bias after its projection and before its rotation; with qk_norm q and k
// pass their heads' RMSNorm there (after any bias; across heads: one norm over
// all of q and one over all of k). out == nullptr skips the down projection
// and residual: a recompute fills s only. `pieces` runs part of the block
// (only its tensors in p are read); out is written by down_proj. With
// post_norm (OLMo 2) the pieces are llama_post_piece's: q, k and v read
// s.input, res2 = input + rms1(attn_out), out = res2 + rms2(mlp_out), written
// by post_feedforward_layernorm (out == nullptr: its statistics only).
template <class T>
void llama_block_forward(T* out, const llama_block_params<T>& p, const llama_block_saved<T>& s,
                         const llama_rope& rope, const llama_dims& d, const gemm_workspace& ws,
                         block_pieces pieces = {});
// scratch.dres holds d(out) on entry and d(input) on return; grads += (a
// bias's: the sum over tokens of its projection's gradient before rotation);
// scratch.dtmp, big and delta are overwritten. The pieces run in reverse
// order; between two ranges the scratch holds what flows (after down_proj:
// big = d(swiglu); after up_proj: big + NF = d(gate), dtmp = its part of
// d(rms2); after gate_proj: dtmp = d(rms2); after o_proj: dtmp = d(attn);
// after v_proj: big = d(q) | d(k), rotated back, dtmp = v's part of d(rms1);
// after k_proj and q_proj: dtmp accumulates; after a norm: dres). Post
// norms' flow is in runtime/cpu/llama.cpp's post_norm_block_backward.
template <class T, class G>
void llama_block_backward(const llama_block_grads<G>& g, const llama_block_params<T>& p,
                          const llama_block_saved<T>& s, const llama_backward_scratch<T>& scratch,
                          const llama_rope& rope, const llama_dims& d, const gemm_workspace& ws,
                          block_pieces pieces = {});

// Final RMSNorm and head with the loss, as gpt2_head_forward: logits (N, Vp)
// end holding dloss_scale * d(loss sum)/d(logits), zero in the padded
// columns; losses (N) fp32. head_w is (Vp, C): the embedding when tied.
template <class T>
void llama_head_forward(T* logits, float* losses, const int32_t* targets, const T* norm_w,
                        const T* head_w, const llama_final_norm_saved<T>& s, const llama_dims& d,
                        float dloss_scale, const gemm_workspace& ws);
// scratch.dres = d(input of the final norm) (overwritten); grads +=.
template <class T, class G>
void llama_head_backward(G* dnorm_w, G* dhead_w, const T* norm_w, const T* head_w, const T* logits,
                         const llama_final_norm_saved<T>& s,
                         const llama_backward_scratch<T>& scratch, const llama_dims& d,
                         const gemm_workspace& ws);
