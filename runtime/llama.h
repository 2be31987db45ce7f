// llama: the family's layers composed from kernels (RMSNorm, rotary
// positions, grouped-query flash attention, SwiGLU, nn.Linear GEMMs) over
// the saved-activation, parameter and scratch layouts of runtime/model/llama.h, which
// the planner totals. A generated step calls these with pointers into the
// arena; nothing here allocates. Linear weights are (out, in) as in
// Hugging Face's nn.Linear; only q, k and v have biases, and only with
// qkv_bias (Qwen2); with qk_norm (Qwen3) each head's q and k pass an RMSNorm
// before their rotation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/block_pieces.h"
#include "runtime/gemm.h"

struct llama_dims {
  int64_t B = 0;         // sequences in the micro-batch
  int64_t T = 0;         // context
  int64_t C = 0;         // width
  int64_t H = 0;         // query heads
  int64_t KV_heads = 0;  // key/value heads (grouped-query attention; divides H)
  int64_t F = 0;         // MLP hidden
  int64_t V = 0;         // vocab
  // Always true: llama's attention saves the log-sum-exp (the plan's flash
  // layout); kept for the layout tables, which are shared with gpt2.
  bool flash = true;
  int64_t V_padded = 0;    // stored rows of the embedding and head (0: V)
  float norm_eps = 1e-5f;  // RMSNorm's epsilon
  bool qkv_bias = false;   // q, k and v projections have biases (Qwen2)
  bool qk_norm = false;    // each head's q and k pass an RMSNorm before the rotation (Qwen3)
  int64_t head_dim = 0;    // head size (0: C / H)
  int64_t window = 0;      // query t attends keys u with t - u < window (Mistral); 0: all u <= t
  int64_t N() const { return B * T; }
  int64_t D() const { return head_dim != 0 ? head_dim : C / H; }  // head size
  int64_t Q() const { return H * D(); }                           // width of q
  int64_t KV() const { return KV_heads * D(); }                   // width of k and of v
  int64_t Vp() const { return V_padded > V ? V_padded : V; }
};

// The rotary tables (the plan's rope_tables buffer): cos then sin of
// position t's angle at frequency i, (T, D / 2) fp32 each.
struct llama_rope {
  const float* cos;
  const float* sin;
};
llama_rope llama_rope_at(const float* tables, const llama_dims& d);

template <class T>
struct llama_block_params {
  const T* rms1_w;    // (C)
  const T* q_w;       // (Q, C)
  const T* k_w;       // (KV, C)
  const T* v_w;       // (KV, C)
  const T* q_b;       // (Q)   qkv_bias only, else null
  const T* k_b;       // (KV)  qkv_bias only, else null
  const T* v_b;       // (KV)  qkv_bias only, else null
  const T* q_norm_w;  // (D)  qk_norm only, else null
  const T* k_norm_w;  // (D)  qk_norm only, else null
  const T* o_w;       // (C, Q)
  const T* rms2_w;    // (C)
  const T* gate_w;    // (F, C)
  const T* up_w;      // (F, C)
  const T* down_w;    // (C, F)
};
// The block's tensors from its first tensor, as runtime/model/llama.h lays them out.
template <class T>
llama_block_params<T> llama_block_params_at(const T* base, const llama_dims& d);

template <class G>
struct llama_block_grads {
  G *rms1_w, *q_w, *k_w, *v_w, *o_w, *rms2_w, *gate_w, *up_w, *down_w;
  G *q_b, *k_b, *v_b;      // qkv_bias only, else null
  G *q_norm_w, *k_norm_w;  // qk_norm only, else null
};
template <class G>
llama_block_grads<G> llama_block_grads_at(G* base, const llama_dims& d);

template <class T>
struct llama_block_saved {
  float *rms1_rstd, *rms2_rstd;  // (N)
  float* lse;                    // (B, H, T) log-sum-exp of each query's scaled scores
  T* input;                      // (N, C)
  T* rms1;                       // (N, C)
  float *q_rstd, *k_rstd;        // (N, H), (N, KV_heads): qk_norm only, else null
  T* q_raw;                      // (N, Q) before the norm: qk_norm only, else null
  T* k_raw;                      // (N, KV) before the norm: qk_norm only, else null
  T* q;                          // (N, Q) after the rotation
  T* k;                          // (N, KV) after the rotation
  T* v;                          // (N, KV)
  T* attn;                       // (N, Q)
  T* res2;                       // (N, C)
  T* rms2;                       // (N, C)
  T* gate;                       // (N, F)
  T* up;                         // (N, F)
  T* swiglu;                     // (N, F) silu(gate) * up
};
template <class T>
llama_block_saved<T> llama_block_saved_at(std::byte* slot, const llama_dims& d);

template <class T>
struct llama_final_norm_saved {
  float* rstd;  // (N)
  T* input;     // (N, C)
  T* output;    // (N, C)
};
template <class T>
llama_final_norm_saved<T> llama_final_norm_saved_at(std::byte* slot, const llama_dims& d);

template <class T>
struct llama_backward_scratch {
  T* dres;       // (N, C) gradient of the residual stream, updated in place layer by layer
  T* dtmp;       // (N, max(C, Q))
  T* big;        // (N, max(3C, 3F, Q + 2KV)): d(swiglu), d(gate), d(up); d(q), d(k), d(v)
                 // (with qk_norm 2Q + 3KV: then d(q) and d(k) before their norms)
  float* delta;  // (B, H, T) rowsum(d(attn) * attn) per head and query
};
template <class T>
llama_backward_scratch<T> llama_backward_scratch_at(std::byte* base, const llama_dims& d);

// Embedding: out = wte[tokens] (N, C).
template <class T>
void llama_embed_forward(T* out, const int32_t* tokens, const T* wte, const llama_dims& d);
// dwte[tokens[n]] += s.dres[n], in position order.
template <class T, class G>
void llama_embed_backward(G* dwte, const int32_t* tokens, const llama_backward_scratch<T>& s,
                          const llama_dims& d);

// A block's pieces, in the order of runtime/model/llama.h's kLlamaBlockPieces:
// input_layernorm, q_proj (with q's rotation), k_proj (with k's), v_proj
// (with the attention), o_proj (with the residual), post_attention_layernorm,
// gate_proj, up_proj (with SwiGLU), down_proj (with the residual).
enum llama_piece : int {
  kLlamaRms1,
  kLlamaQ,
  kLlamaK,
  kLlamaV,
  kLlamaO,
  kLlamaRms2,
  kLlamaGate,
  kLlamaUp,
  kLlamaDown,
  kLlamaPieces
};

// One block: reads s.input, fills the rest of s, writes out (N, C) (which may
// be the next layer's saved input). With qkv_bias each of q, k and v adds its
// bias after its projection and before its rotation; with qk_norm q and k
// pass their heads' RMSNorm there (after any bias). out == nullptr skips the down projection
// and residual: a recompute fills s only. `pieces` runs part of the block
// (only its tensors in p are read); out is written by down_proj.
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
// after k_proj and q_proj: dtmp accumulates; after a norm: dres).
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
