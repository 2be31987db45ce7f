// gpt2 (CPU): the family's layers composed from runtime/cpu/kernels.h, over
// the tensors of runtime/gpt2.h. A generated step calls these with pointers
// into the arena; nothing here allocates.
#pragma once

#include <cstdint>

#include "runtime/block_pieces.h"
#include "runtime/cpu/gemm.h"
#include "runtime/gpt2.h"

// Embedding: out = wte[tokens] + wpe. (wte, wpe are the embed layer's tensors.)
template <class T>
void gpt2_embed_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                        const gpt2_dims& d);
// dwte, dwpe += from dres.
template <class T, class G>
void gpt2_embed_backward(G* dwte, G* dwpe, const int32_t* tokens, const gpt2_backward_scratch<T>& s,
                         const gpt2_dims& d);

// One block: reads s.input, fills the rest of s, writes out (N, C) (which may
// be the next layer's saved input). out == nullptr skips the last projection
// and residual: a recompute fills s only. `pieces` runs part of the block
// (runtime/model/gpt2.h's kGpt2BlockPieces; only its tensors in p are read): out is
// written by the last piece, mlp.c_proj.
template <class T>
void gpt2_block_forward(T* out, const gpt2_block_params<T>& p, const gpt2_block_saved<T>& s,
                        const gpt2_dims& d, const gemm_workspace& ws, block_pieces pieces = {});
// scratch.dres holds d(out) on entry and d(input) on return; grads +=. A
// range of pieces runs their backward in reverse order; between two ranges
// the scratch holds what flows (after mlp.c_proj: big = d(fc); after
// mlp.c_fc: dtmp = d(ln2); after attn.c_proj: dtmp = d(attn); after
// attn.c_attn: dtmp = d(ln1); after a norm: dres).
template <class T, class G>
void gpt2_block_backward(const gpt2_block_grads<G>& g, const gpt2_block_params<T>& p,
                         const gpt2_block_saved<T>& s, const gpt2_backward_scratch<T>& scratch,
                         const gpt2_dims& d, const gemm_workspace& ws, block_pieces pieces = {});

// Final norm and head with the loss: reads s.input; fills s; logits (N, Vp)
// end holding dloss_scale * d(loss sum)/d(logits), zero in the padded columns
// [V, Vp), which take no part in the loss; losses (N) fp32 per token.
// head_w is (Vp, C): the token embedding when tied, else lm_head.weight; its
// padded rows receive zero gradient.
template <class T>
void gpt2_head_forward(T* logits, float* losses, const int32_t* targets, const T* lnf_w,
                       const T* lnf_b, const T* head_w, const gpt2_final_norm_saved<T>& s,
                       const gpt2_dims& d, float dloss_scale, const gemm_workspace& ws);
// scratch.dres = d(input of the final norm) (overwritten); grads +=.
template <class T, class G>
void gpt2_head_backward(G* dlnf_w, G* dlnf_b, G* dhead_w, const T* lnf_w, const T* head_w,
                        const T* logits, const gpt2_final_norm_saved<T>& s,
                        const gpt2_backward_scratch<T>& scratch, const gpt2_dims& d,
                        const gemm_workspace& ws);
