// llama layout: the llama family's tables (runtime/model/layout.h): a block's
// parameter tensors and saved arrays, the final norm's and the backward
// scratch, which the planner totals; the fp32 rows come first so that every
// row is aligned for any shape. With qkv_bias (Qwen2), q, k and v have biases;
// with qk_norm (Qwen3), each head's q and k pass an RMSNorm (one weight of the
// head size, shared by the heads) before their rotation. q is Q wide (heads *
// head size), which is C unless the spec gives head_dim.
#pragma once

#include <cmath>

#include "runtime/model/layout.h"

namespace fsdpgen::model {

// The token embedding, the final RMSNorm and an untied head.
inline constexpr Tensor kLlamaEmbedParams[] = {
    {"wte", "model.embed_tokens.weight", {Vocab, C}, true},
};
inline constexpr Tensor kLlamaFinalNormParams[] = {
    {"norm_w", "model.norm.weight", {C}},
};
inline constexpr Tensor kLlamaHeadParams[] = {
    {"head_w", "lm_head.weight", {Vocab, C}, true},
};

// A block's tensors in flat-parameter order (nn.Linear: weights are (out, in)).
inline constexpr Tensor kLlamaBlockParams[] = {
    {"rms1_w", "input_layernorm.weight", {C}},   {"q_w", "self_attn.q_proj.weight", {Q, C}},
    {"k_w", "self_attn.k_proj.weight", {KV, C}}, {"v_w", "self_attn.v_proj.weight", {KV, C}},
    {"o_w", "self_attn.o_proj.weight", {C, Q}},  {"rms2_w", "post_attention_layernorm.weight", {C}},
    {"gate_w", "mlp.gate_proj.weight", {F, C}},  {"up_w", "mlp.up_proj.weight", {F, C}},
    {"down_w", "mlp.down_proj.weight", {C, F}},
};

// Qwen2's block (the spec's qkv_bias): llama's tensors with a bias after each
// of q's, k's and v's weights (o has none), each bias in its weight's piece.
inline constexpr Tensor kLlamaQkvBiasBlockParams[] = {
    kLlamaBlockParams[0],
    kLlamaBlockParams[1],
    {"q_b", "self_attn.q_proj.bias", {Q}},
    kLlamaBlockParams[2],
    {"k_b", "self_attn.k_proj.bias", {KV}},
    kLlamaBlockParams[3],
    {"v_b", "self_attn.v_proj.bias", {KV}},
    kLlamaBlockParams[4],
    kLlamaBlockParams[5],
    kLlamaBlockParams[6],
    kLlamaBlockParams[7],
    kLlamaBlockParams[8],
};

// Qwen3's block (the spec's qk_norm): llama's tensors with q's and k's
// RMSNorm weights (one head's size) after their projections, in their pieces.
inline constexpr Tensor kLlamaQkNormBlockParams[] = {
    kLlamaBlockParams[0],
    kLlamaBlockParams[1],
    {"q_norm_w", "self_attn.q_norm.weight", {HeadDim}},
    kLlamaBlockParams[2],
    {"k_norm_w", "self_attn.k_norm.weight", {HeadDim}},
    kLlamaBlockParams[3],
    kLlamaBlockParams[4],
    kLlamaBlockParams[5],
    kLlamaBlockParams[6],
    kLlamaBlockParams[7],
    kLlamaBlockParams[8],
};

// With qk_norm across heads (OLMo 2): q's norm weight is q's width, k's k's.
inline constexpr Tensor kLlamaQkNormAcrossBlockParams[] = {
    kLlamaBlockParams[0],
    kLlamaBlockParams[1],
    {"q_norm_w", "self_attn.q_norm.weight", {Q}},
    kLlamaBlockParams[2],
    {"k_norm_w", "self_attn.k_norm.weight", {KV}},
    kLlamaBlockParams[3],
    kLlamaBlockParams[4],
    kLlamaBlockParams[5],
    kLlamaBlockParams[6],
    kLlamaBlockParams[7],
    kLlamaBlockParams[8],
};

// OLMo 2's post-norm block (block_norms = post, with qk_norm), in forward
// order: attention's projections with q's and k's norms, then rms1_w, the norm
// of attention's output (Hugging Face's post_attention_layernorm), the MLP,
// then rms2_w, the norm of the MLP's output (post_feedforward_layernorm).
// There is no input_layernorm.
#define FSDPGEN_LLAMA_POST_NORM_PARAMS(q_norm_shape, k_norm_shape)                     \
  {                                                                                    \
    kLlamaBlockParams[1], {"q_norm_w", "self_attn.q_norm.weight", {q_norm_shape}},     \
        kLlamaBlockParams[2], {"k_norm_w", "self_attn.k_norm.weight", {k_norm_shape}}, \
        kLlamaBlockParams[3], kLlamaBlockParams[4],                                    \
        {"rms1_w", "post_attention_layernorm.weight", {C}}, kLlamaBlockParams[6],      \
        kLlamaBlockParams[7], kLlamaBlockParams[8], {                                  \
      "rms2_w", "post_feedforward_layernorm.weight", {                                 \
        C                                                                              \
      }                                                                                \
    }                                                                                  \
  }
inline constexpr Tensor kLlamaPostNormBlockParams[] =
    FSDPGEN_LLAMA_POST_NORM_PARAMS(HeadDim, HeadDim);
inline constexpr Tensor kLlamaPostNormAcrossBlockParams[] = FSDPGEN_LLAMA_POST_NORM_PARAMS(Q, KV);
#undef FSDPGEN_LLAMA_POST_NORM_PARAMS

// Gemma 2's and 3's block (block_norms = sandwich): llama's tensors with a
// norm after attention (post_attn_w, Hugging Face's post_attention_layernorm)
// and one after the MLP (post_mlp_w, post_feedforward_layernorm), each in the
// piece of the projection before it; rms2_w is the norm before the MLP
// (pre_feedforward_layernorm). With qk_norm (Gemma 3) each head's q and k
// norms follow their projections as in Qwen3's block.
#define FSDPGEN_LLAMA_SANDWICH_TAIL                                              \
  kLlamaBlockParams[4], {"post_attn_w", "post_attention_layernorm.weight", {C}}, \
      {"rms2_w", "pre_feedforward_layernorm.weight", {C}}, kLlamaBlockParams[6], \
      kLlamaBlockParams[7], kLlamaBlockParams[8], {                              \
    "post_mlp_w", "post_feedforward_layernorm.weight", {                         \
      C                                                                          \
    }                                                                            \
  }
inline constexpr Tensor kLlamaSandwichBlockParams[] = {kLlamaBlockParams[0], kLlamaBlockParams[1],
                                                       kLlamaBlockParams[2], kLlamaBlockParams[3],
                                                       FSDPGEN_LLAMA_SANDWICH_TAIL};
inline constexpr Tensor kLlamaSandwichQkNormBlockParams[] = {
    kLlamaQkNormBlockParams[0], kLlamaQkNormBlockParams[1], kLlamaQkNormBlockParams[2],
    kLlamaQkNormBlockParams[3], kLlamaQkNormBlockParams[4], kLlamaQkNormBlockParams[5],
    FSDPGEN_LLAMA_SANDWICH_TAIL};
#undef FSDPGEN_LLAMA_SANDWICH_TAIL

// What a block's forward saves, per token: the RMSNorm statistics, with
// flash attention the log-sum-exp, the stored activations (q, k, v with
// grouped-query k and v), the SwiGLU MLP's gate, up and silu(gate) * up, then
// without flash attention the probabilities. Each row names the piece
// (kLlamaBlockPieces) that writes it.
inline constexpr Field kLlamaBlockSaved[] = {
    {"rms1_rstd", Elem::Fp32, One, When::Always, 0},
    {"rms2_rstd", Elem::Fp32, One, When::Always, 5},
    {"lse", Elem::Fp32, H, When::Flash, 3},
    {"input", Elem::Param, C},
    {"rms1", Elem::Param, C, When::Always, 0},
    {"q", Elem::Param, Q, When::Always, 1},
    {"k", Elem::Param, KV, When::Always, 2},
    {"v", Elem::Param, KV, When::Always, 3},
    {"attn", Elem::Param, Q, When::Always, 3},
    {"res2", Elem::Param, C, When::Always, 4},
    {"rms2", Elem::Param, C, When::Always, 5},
    {"gate", Elem::Param, F, When::Always, 6},
    {"up", Elem::Param, F, When::Always, 7},
    {"swiglu", Elem::Param, F, When::Always, 7},
    {"probs", Elem::Param, Probs, When::Materialized, 3},
};

// With qk_norm: llama's rows and, written by q's and k's pieces, each head's
// RMSNorm statistics (k's sized as q's: kv_heads <= heads) and q and k before
// their norms.
inline constexpr Field kLlamaQkNormBlockSaved[] = {
    kLlamaBlockSaved[0],
    kLlamaBlockSaved[1],
    kLlamaBlockSaved[2],
    {"q_rstd", Elem::Fp32, H, When::Always, 1},
    {"k_rstd", Elem::Fp32, H, When::Always, 2},
    kLlamaBlockSaved[3],
    kLlamaBlockSaved[4],
    {"q_raw", Elem::Param, Q, When::Always, 1},
    {"k_raw", Elem::Param, KV, When::Always, 2},
    kLlamaBlockSaved[5],
    kLlamaBlockSaved[6],
    kLlamaBlockSaved[7],
    kLlamaBlockSaved[8],
    kLlamaBlockSaved[9],
    kLlamaBlockSaved[10],
    kLlamaBlockSaved[11],
    kLlamaBlockSaved[12],
    kLlamaBlockSaved[13],
    kLlamaBlockSaved[14],
};

// With post norms (and qk_norm): no normed input; attention's output
// projection (attn_out) and the MLP's (mlp_out) before their norms, whose
// statistics are rms1_rstd and rms2_rstd; res2 = input + rms1(attn_out).
// Each row names the piece of kLlamaPostNormBlockPieces that writes it.
inline constexpr Field kLlamaPostNormBlockSaved[] = {
    {"rms1_rstd", Elem::Fp32, One, When::Always, 4},
    {"rms2_rstd", Elem::Fp32, One, When::Always, 8},
    {"lse", Elem::Fp32, H, When::Flash, 2},
    {"q_rstd", Elem::Fp32, H, When::Always, 0},
    {"k_rstd", Elem::Fp32, H, When::Always, 1},
    {"input", Elem::Param, C},
    {"q_raw", Elem::Param, Q, When::Always, 0},
    {"k_raw", Elem::Param, KV, When::Always, 1},
    {"q", Elem::Param, Q, When::Always, 0},
    {"k", Elem::Param, KV, When::Always, 1},
    {"v", Elem::Param, KV, When::Always, 2},
    {"attn", Elem::Param, Q, When::Always, 2},
    {"attn_out", Elem::Param, C, When::Always, 3},
    {"res2", Elem::Param, C, When::Always, 4},
    {"gate", Elem::Param, F, When::Always, 5},
    {"up", Elem::Param, F, When::Always, 6},
    {"swiglu", Elem::Param, F, When::Always, 6},
    {"mlp_out", Elem::Param, C, When::Always, 7},
    {"probs", Elem::Param, Probs, When::Materialized, 2},
};

// With sandwich norms: llama's rows (Qwen3's with qk_norm) and, written by
// o_proj's piece, attention's output projection before its norm (attn_out)
// and that norm's statistics, and by down_proj's the MLP's (mlp_out) and its
// norm's; res2 = input + post_attn(attn_out).
inline constexpr Field kLlamaSandwichBlockSaved[] = {
    kLlamaBlockSaved[0],
    kLlamaBlockSaved[1],
    {"post_attn_rstd", Elem::Fp32, One, When::Always, 4},
    {"post_mlp_rstd", Elem::Fp32, One, When::Always, 8},
    kLlamaBlockSaved[2],
    kLlamaBlockSaved[3],
    kLlamaBlockSaved[4],
    kLlamaBlockSaved[5],
    kLlamaBlockSaved[6],
    kLlamaBlockSaved[7],
    kLlamaBlockSaved[8],
    {"attn_out", Elem::Param, C, When::Always, 4},
    kLlamaBlockSaved[9],
    kLlamaBlockSaved[10],
    kLlamaBlockSaved[11],
    kLlamaBlockSaved[12],
    kLlamaBlockSaved[13],
    {"mlp_out", Elem::Param, C, When::Always, 8},
    kLlamaBlockSaved[14],
};

// With qk_norm (Gemma 3): and Qwen3's rows of q's and k's norms.
inline constexpr Field kLlamaSandwichQkNormBlockSaved[] = {
    kLlamaSandwichBlockSaved[0],  kLlamaSandwichBlockSaved[1],  kLlamaSandwichBlockSaved[2],
    kLlamaSandwichBlockSaved[3],  kLlamaSandwichBlockSaved[4],  kLlamaQkNormBlockSaved[3],
    kLlamaQkNormBlockSaved[4],    kLlamaSandwichBlockSaved[5],  kLlamaSandwichBlockSaved[6],
    kLlamaQkNormBlockSaved[7],    kLlamaQkNormBlockSaved[8],    kLlamaSandwichBlockSaved[7],
    kLlamaSandwichBlockSaved[8],  kLlamaSandwichBlockSaved[9],  kLlamaSandwichBlockSaved[10],
    kLlamaSandwichBlockSaved[11], kLlamaSandwichBlockSaved[12], kLlamaSandwichBlockSaved[13],
    kLlamaSandwichBlockSaved[14], kLlamaSandwichBlockSaved[15], kLlamaSandwichBlockSaved[16],
    kLlamaSandwichBlockSaved[17], kLlamaSandwichBlockSaved[18],
};

inline constexpr Field kLlamaFinalNormSaved[] = {
    {"rstd", Elem::Fp32, One},
    {"input", Elem::Param, C},
    {"output", Elem::Param, C},
};

// As gpt2's (runtime/model/gpt2.h), dtmp as wide as q too, with the largest intermediate gradient
// also covering d(gate), d(up), d(swiglu) and d(q), d(k), d(v).
inline constexpr Field kLlamaBackwardScratch[] = {
    {"dres", Elem::Param, C},
    {"dtmp", Elem::Param, max_of(C, Q)},  // d(attn) is Q wide
    {"big", Elem::Param, max_of(3 * C + Probs, 3 * F, Q + 2 * KV)},
    {"delta", Elem::Fp32, H, When::Flash},
};

// With qk_norm the largest also holds d(q) and d(k) before their norms, after
// d(q), d(k) and d(v).
inline constexpr Field kLlamaQkNormBackwardScratch[] = {
    kLlamaBackwardScratch[0],
    kLlamaBackwardScratch[1],
    {"big", Elem::Param, max_of(3 * C + Probs, 3 * F, 2 * Q + 3 * KV)},
    kLlamaBackwardScratch[3],
};

// A block's pieces (Piece, runtime/model/layout.h): runtime/llama runs any range of them.
inline constexpr Piece kLlamaBlockPieces[] = {
    {"input_layernorm", 0, 1},         {"self_attn.q_proj", 1, 1, C, Q},
    {"self_attn.k_proj", 2, 1, C, KV}, {"self_attn.v_proj", 3, 1, C, KV, true},
    {"self_attn.o_proj", 4, 1, Q, C},  {"post_attention_layernorm", 5, 1},
    {"mlp.gate_proj", 6, 1, C, F},     {"mlp.up_proj", 7, 1, C, F},
    {"mlp.down_proj", 8, 1, F, C},
};

// kLlamaBlockPieces over kLlamaQkvBiasBlockParams: the same pieces, q's, k's
// and v's with their biases.
constexpr Piece with_tensors(Piece p, int first_tensor, int tensors) {
  p.first_tensor = first_tensor;
  p.tensors = tensors;
  return p;
}
inline constexpr Piece kLlamaQkvBiasBlockPieces[] = {
    kLlamaBlockPieces[0],
    with_tensors(kLlamaBlockPieces[1], 1, 2),
    with_tensors(kLlamaBlockPieces[2], 3, 2),
    with_tensors(kLlamaBlockPieces[3], 5, 2),
    with_tensors(kLlamaBlockPieces[4], 7, 1),
    with_tensors(kLlamaBlockPieces[5], 8, 1),
    with_tensors(kLlamaBlockPieces[6], 9, 1),
    with_tensors(kLlamaBlockPieces[7], 10, 1),
    with_tensors(kLlamaBlockPieces[8], 11, 1),
};

// kLlamaBlockPieces over kLlamaQkNormBlockParams: q's and k's with their norms.
inline constexpr Piece kLlamaQkNormBlockPieces[] = {
    kLlamaBlockPieces[0],
    with_tensors(kLlamaBlockPieces[1], 1, 2),
    with_tensors(kLlamaBlockPieces[2], 3, 2),
    with_tensors(kLlamaBlockPieces[3], 5, 1),
    with_tensors(kLlamaBlockPieces[4], 6, 1),
    with_tensors(kLlamaBlockPieces[5], 7, 1),
    with_tensors(kLlamaBlockPieces[6], 8, 1),
    with_tensors(kLlamaBlockPieces[7], 9, 1),
    with_tensors(kLlamaBlockPieces[8], 10, 1),
};

// The post-norm block's pieces (kLlamaPostNormBlockParams): q's and k's with
// their norms, each norm after its sub-block with the residual add.
inline constexpr Piece kLlamaPostNormBlockPieces[] = {
    {"self_attn.q_proj", 0, 2, C, Q},
    {"self_attn.k_proj", 2, 2, C, KV},
    {"self_attn.v_proj", 4, 1, C, KV, true},
    {"self_attn.o_proj", 5, 1, Q, C},
    {"post_attention_layernorm", 6, 1},
    {"mlp.gate_proj", 7, 1, C, F},
    {"mlp.up_proj", 8, 1, C, F},
    {"mlp.down_proj", 9, 1, F, C},
    {"post_feedforward_layernorm", 10, 1},
};

// The sandwich block's pieces (kLlamaSandwichBlockParams): llama's, o_proj
// and down_proj each with the norm after it (and the residual add), the norm
// before the MLP named as Gemma names it; with qk_norm (Gemma 3's
// kLlamaSandwichQkNormBlockParams) q's and k's with their norms.
inline constexpr Piece kLlamaSandwichBlockPieces[] = {
    kLlamaBlockPieces[0],
    kLlamaBlockPieces[1],
    kLlamaBlockPieces[2],
    kLlamaBlockPieces[3],
    with_tensors(kLlamaBlockPieces[4], 4, 2),
    {"pre_feedforward_layernorm", 6, 1},
    with_tensors(kLlamaBlockPieces[6], 7, 1),
    with_tensors(kLlamaBlockPieces[7], 8, 1),
    with_tensors(kLlamaBlockPieces[8], 9, 2),
};
inline constexpr Piece kLlamaSandwichQkNormBlockPieces[] = {
    kLlamaQkNormBlockPieces[0],
    kLlamaQkNormBlockPieces[1],
    kLlamaQkNormBlockPieces[2],
    kLlamaQkNormBlockPieces[3],
    with_tensors(kLlamaBlockPieces[4], 6, 2),
    {"pre_feedforward_layernorm", 8, 1},
    with_tensors(kLlamaBlockPieces[6], 9, 1),
    with_tensors(kLlamaBlockPieces[7], 10, 1),
    with_tensors(kLlamaBlockPieces[8], 11, 2),
};

// The modules a custom layer can replace (Module, runtime/model/layout.h).
inline constexpr Module kLlamaModules[] = {
    {"input_layernorm", 0, 1, "input", "rms1", nullptr, false},
    {"self_attn", 1, 5, "rms1", "res2", "input", true},
    {"post_attention_layernorm", 5, 6, "res2", "rms2", nullptr, false},
    {"mlp", 6, 9, "rms2", nullptr, "res2", true},
    {"after_mlp", 9, 9, nullptr, nullptr, nullptr, false},
};

inline constexpr ParamLayout kLlamaParams{
    "model.layers.{}.", kLlamaEmbedParams, kLlamaBlockParams, kLlamaFinalNormParams,
    kLlamaHeadParams,   kLlamaBlockPieces, kLlamaModules};

inline constexpr ParamLayout kLlamaQkvBiasParams{
    "model.layers.{}.",    kLlamaEmbedParams, kLlamaQkvBiasBlockParams,
    kLlamaFinalNormParams, kLlamaHeadParams,  kLlamaQkvBiasBlockPieces,
    kLlamaModules};

inline constexpr ParamLayout kLlamaQkNormParams{
    "model.layers.{}.",    kLlamaEmbedParams, kLlamaQkNormBlockParams,
    kLlamaFinalNormParams, kLlamaHeadParams,  kLlamaQkNormBlockPieces,
    kLlamaModules};

inline constexpr ParamLayout kLlamaQkNormAcrossParams{
    "model.layers.{}.",    kLlamaEmbedParams, kLlamaQkNormAcrossBlockParams,
    kLlamaFinalNormParams, kLlamaHeadParams,  kLlamaQkNormBlockPieces,
    kLlamaModules};

// A post-norm block has no module a custom layer can replace (dsl/Rules.cpp
// refuses custom layers with it).
inline constexpr ParamLayout kLlamaPostNormParams{"model.layers.{}.",
                                                  kLlamaEmbedParams,
                                                  kLlamaPostNormBlockParams,
                                                  kLlamaFinalNormParams,
                                                  kLlamaHeadParams,
                                                  kLlamaPostNormBlockPieces,
                                                  {}};
inline constexpr ParamLayout kLlamaPostNormAcrossParams{"model.layers.{}.",
                                                        kLlamaEmbedParams,
                                                        kLlamaPostNormAcrossBlockParams,
                                                        kLlamaFinalNormParams,
                                                        kLlamaHeadParams,
                                                        kLlamaPostNormBlockPieces,
                                                        {}};

// A sandwich block has no module a custom layer can replace either.
inline constexpr ParamLayout kLlamaSandwichParams{"model.layers.{}.",
                                                  kLlamaEmbedParams,
                                                  kLlamaSandwichBlockParams,
                                                  kLlamaFinalNormParams,
                                                  kLlamaHeadParams,
                                                  kLlamaSandwichBlockPieces,
                                                  {}};
inline constexpr ParamLayout kLlamaSandwichQkNormParams{"model.layers.{}.",
                                                        kLlamaEmbedParams,
                                                        kLlamaSandwichQkNormBlockParams,
                                                        kLlamaFinalNormParams,
                                                        kLlamaHeadParams,
                                                        kLlamaSandwichQkNormBlockPieces,
                                                        {}};

// The window attention runs with (the spec's sliding_window, Mistral's):
// 0 where none is given or it is at least the context.
constexpr int64_t attention_window_of(int64_t sliding_window, int64_t context) {
  return sliding_window < context ? sliding_window : 0;
}
// The scale of q . k attention runs with (Gemma 2's query_pre_attn_scalar s):
// 1 / sqrt(s), or 0 (the kernels' 1 / sqrt(head size)) where s is 0 or the
// head size. The emitter's llama_dims and the CUDA backend's cuDNN graphs
// take it from here, so that the graphs' key finds the layers' scale.
inline double attention_scale_of(double query_pre_attn_scalar, int64_t head_size) {
  const double s = query_pre_attn_scalar;
  return s != 0 && s != static_cast<double>(head_size) ? 1.0 / std::sqrt(s) : 0.0;
}

// Gemma 2's and 3's alternating layers (the spec's global_every N): layers
// N - 1, 2N - 1, ... are global, the others local (the window, and the local
// rotary base where given); 0: no layer is local.
constexpr bool local_layer(int64_t global_every, int64_t layer) {
  return global_every != 0 && (layer + 1) % global_every != 0;
}
// Whether `layer` attends the window where the model has one (transformers'
// "sliding_attention"): every layer unless they alternate, else the local ones.
constexpr bool windowed_layer(int64_t global_every, int64_t layer) {
  return global_every == 0 || local_layer(global_every, layer);
}

// The llama options that choose the tables (the spec's qkv_bias, qk_norm and
// block_norms; dsl/Rules.cpp refuses qk_norm with qkv_bias, post norms
// without qk_norm, and sandwich norms with qkv_bias or qk_norm across heads).
struct LlamaTables {
  bool qkv_bias = false;
  bool qk_norm = false;
  bool qk_norm_across_heads = false;
  bool post_norm = false;
  bool sandwich_norm = false;
};

// The family's tensors: Gemma 2's with sandwich norms (Gemma 3's with
// qk_norm), OLMo 2's with post norms, Qwen2's with qkv_bias, Qwen3's with
// qk_norm (OLMo 2's norms with it across heads), else Llama's.
constexpr const ParamLayout& llama_params(const LlamaTables& t) {
  if (t.sandwich_norm) return t.qk_norm ? kLlamaSandwichQkNormParams : kLlamaSandwichParams;
  if (t.post_norm)
    return t.qk_norm_across_heads ? kLlamaPostNormAcrossParams : kLlamaPostNormParams;
  if (t.qk_norm) return t.qk_norm_across_heads ? kLlamaQkNormAcrossParams : kLlamaQkNormParams;
  return t.qkv_bias ? kLlamaQkvBiasParams : kLlamaParams;
}
constexpr const ParamLayout& llama_params(bool qkv_bias, bool qk_norm = false) {
  return llama_params(LlamaTables{qkv_bias, qk_norm});
}

inline constexpr ActivationLayout kLlamaActivations{kLlamaBlockSaved, kLlamaFinalNormSaved,
                                                    kLlamaBackwardScratch};
inline constexpr ActivationLayout kLlamaQkNormActivations{
    kLlamaQkNormBlockSaved, kLlamaFinalNormSaved, kLlamaQkNormBackwardScratch};

// Post norms' d(attn_out) passes through big (after its MLP rows, before d(q)).
inline constexpr ActivationLayout kLlamaPostNormActivations{
    kLlamaPostNormBlockSaved, kLlamaFinalNormSaved, kLlamaQkNormBackwardScratch};

// Sandwich norms' d(attn_out) passes through big, before d(q).
inline constexpr ActivationLayout kLlamaSandwichActivations{
    kLlamaSandwichBlockSaved, kLlamaFinalNormSaved, kLlamaBackwardScratch};
inline constexpr ActivationLayout kLlamaSandwichQkNormActivations{
    kLlamaSandwichQkNormBlockSaved, kLlamaFinalNormSaved, kLlamaQkNormBackwardScratch};

// The family's activation memory: Gemma 2's and 3's with sandwich norms,
// OLMo 2's with post norms, Qwen3's with qk_norm (either span: q_rstd and
// k_rstd have room for each head's), else Llama's.
constexpr const ActivationLayout& llama_activations(const LlamaTables& t) {
  if (t.sandwich_norm)
    return t.qk_norm ? kLlamaSandwichQkNormActivations : kLlamaSandwichActivations;
  if (t.post_norm) return kLlamaPostNormActivations;
  return t.qk_norm ? kLlamaQkNormActivations : kLlamaActivations;
}
constexpr const ActivationLayout& llama_activations(bool qk_norm) {
  return llama_activations(LlamaTables{false, qk_norm});
}

}  // namespace fsdpgen::model
