// llama: the family's tensors as both backends see them: the dimensions, a
// block's pieces, the rotary tables, and the pointers into the
// saved-activation, parameter and scratch layouts of runtime/model/llama.h,
// which the planner totals. The layers over them are runtime/cpu/llama.h's
// and runtime/cuda/llama.h's. Linear weights are (out, in) as in Hugging
// Face's nn.Linear; only q, k and v have biases, and only with qkv_bias
// (Qwen2); with qk_norm (Qwen3) each head's q and k pass an RMSNorm before
// their rotation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/attention_options.h"
#include "runtime/block_pieces.h"
#include "runtime/dtype.h"
#include "runtime/kernel_math.h"

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
  // With qk_norm: one RMSNorm over all of q (Q wide) and one over all of k
  // (KV wide), not one per head (OLMo 2).
  bool qk_norm_across_heads = false;
  // rms1 and rms2 follow attention and the MLP, before each residual add, and
  // q, k, v read the block's input (OLMo 2): pieces in llama_post_piece order.
  bool post_norm = false;
  // Gemma's pieces (program_model's fields of the same names).
  bool scale_embedding = false;  // the embedding's rows times sqrt(C) into the first block
  bool norm_plus_one = false;    // every RMSNorm scales by (1 + weight)
  bool gelu_gate = false;        // the MLP's gate is GELU (tanh form), GeGLU; else SiLU, SwiGLU
  // Gemma 2's attention and head (program_model's attention_softcap,
  // logit_softcap and query_pre_attn_scalar): q . k scaled by attn_scale (0:
  // 1 / sqrt(D)), scores and logits soft-capped, X tanh(x / X) (0: none).
  float attn_scale = 0.0f;
  float attn_softcap = 0.0f;
  float logit_softcap = 0.0f;
  // Gemma 2's and 3's norms after attention and the MLP as well as before
  // (post_attn_w, post_mlp_w), each before its residual add; pieces in llama_piece order.
  bool sandwich_norm = false;
  // The layer's rotary table is the second of the plan's rope_tables (the
  // local layers' base, Gemma 3's rope_local_base_freq).
  bool local_rope = false;
  // What each RMSNorm adds to its weights.
  float norm_weight_offset() const { return norm_plus_one ? 1.0f : 0.0f; }
  int64_t N() const { return B * T; }
  // A local layer's dims where the layers alternate (Gemma 2 and 3): the
  // window, and with a local base the second rotary table.
  constexpr llama_dims windowed(int64_t w, bool local) const {
    llama_dims d = *this;
    d.window = w;
    d.local_rope = local;
    return d;
  }
  int64_t D() const { return head_dim != 0 ? head_dim : C / H; }  // head size
  int64_t Q() const { return H * D(); }                           // width of q
  int64_t KV() const { return KV_heads * D(); }                   // width of k and of v
  int64_t Vp() const { return V_padded > V ? V_padded : V; }
};

// The attention kernels' options of a layer: its window, and Gemma 2's
// scale and soft-cap.
inline attention_options attention_options_of(const llama_dims& d) {
  return {d.window, d.attn_scale, d.attn_softcap};
}

// Gemma's embedding scale (scale_embedding): sqrt(C) rounded to T, as
// transformers casts it to the weights' dtype (55.5 for 55.43 in bf16); both
// backends' embedding forward and backward multiply by it.
template <class T>
float llama_embedding_scale(const llama_dims& d) {
  return to_float(from_float<T>(embedding_scale_of(d.C)));
}

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

// A post-norm block's pieces (post_norm), in the order of
// runtime/model/llama.h's kLlamaPostNormBlockPieces: q_proj (with q's norm
// and rotation), k_proj (with k's), v_proj (with the attention), o_proj,
// post_attention_layernorm (rms1, with the residual), gate_proj, up_proj
// (with SwiGLU), down_proj, post_feedforward_layernorm (rms2, with the residual).
enum llama_post_piece : int {
  kLlamaPostQ,
  kLlamaPostK,
  kLlamaPostV,
  kLlamaPostO,
  kLlamaPostRms1,
  kLlamaPostGate,
  kLlamaPostUp,
  kLlamaPostDown,
  kLlamaPostRms2,
  kLlamaPostPieces
};

// The rotary tables (the plan's rope_tables buffer): cos then sin of
// position t's angle at frequency i, (T, D / 2) fp32 each; with a local base
// (Gemma 3) the local layers' cos and sin follow (local_rope).
struct llama_rope {
  const float* cos;
  const float* sin;
};
llama_rope llama_rope_at(const float* tables, const llama_dims& d);

template <class T>
struct llama_block_params {
  const T* rms1_w;       // (C) before attention; with post_norm after it
  const T* q_w;          // (Q, C)
  const T* k_w;          // (KV, C)
  const T* v_w;          // (KV, C)
  const T* q_b;          // (Q)   qkv_bias only, else null
  const T* k_b;          // (KV)  qkv_bias only, else null
  const T* v_b;          // (KV)  qkv_bias only, else null
  const T* q_norm_w;     // (D), across heads (Q): qk_norm only, else null
  const T* k_norm_w;     // (D), across heads (KV): qk_norm only, else null
  const T* o_w;          // (C, Q)
  const T* rms2_w;       // (C) before the MLP; with post_norm after it
  const T* gate_w;       // (F, C)
  const T* up_w;         // (F, C)
  const T* down_w;       // (C, F)
  const T* post_attn_w;  // (C) after attention: sandwich_norm only, else null
  const T* post_mlp_w;   // (C) after the MLP: sandwich_norm only, else null
};
// The block's tensors from its first tensor, as runtime/model/llama.h lays them out.
template <class T>
llama_block_params<T> llama_block_params_at(const T* base, const llama_dims& d);

template <class G>
struct llama_block_grads {
  G *rms1_w, *q_w, *k_w, *v_w, *o_w, *rms2_w, *gate_w, *up_w, *down_w;
  G *q_b, *k_b, *v_b;           // qkv_bias only, else null
  G *q_norm_w, *k_norm_w;       // qk_norm only, else null
  G *post_attn_w, *post_mlp_w;  // sandwich_norm only, else null
};
template <class G>
llama_block_grads<G> llama_block_grads_at(G* base, const llama_dims& d);

template <class T>
struct llama_block_saved {
  float *rms1_rstd, *rms2_rstd;           // (N)
  float *post_attn_rstd, *post_mlp_rstd;  // (N): sandwich_norm only, else null
  float* lse;                             // (B, H, T) log-sum-exp of each query's scaled scores
  T* input;                               // (N, C)
  T* rms1;                                // (N, C): pre-norm only, else null
  float *q_rstd, *k_rstd;                 // (N, H), (N, KV_heads); across heads (N): qk_norm only
  T* q_raw;                               // (N, Q) before the norm: qk_norm only, else null
  T* k_raw;                               // (N, KV) before the norm: qk_norm only, else null
  T* q;                                   // (N, Q) after the rotation
  T* k;                                   // (N, KV) after the rotation
  T* v;                                   // (N, KV)
  T* attn;                                // (N, Q)
  T* attn_out;  // (N, C) o_proj's output before its norm: post or sandwich only
  T* res2;      // (N, C) input + attention's branch
  T* rms2;      // (N, C): pre-norm only, else null
  T* gate;      // (N, F)
  T* up;        // (N, F)
  T* swiglu;    // (N, F) silu(gate) * up
  T* mlp_out;   // (N, C) down_proj's output before its norm: post or sandwich only
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
