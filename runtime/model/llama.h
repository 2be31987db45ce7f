// llama layout: the llama family's tables (runtime/model/layout.h): a block's
// parameter tensors and saved arrays, the final norm's and the backward
// scratch, which the planner totals; the fp32 rows come first so that every
// row is aligned for any shape. With qkv_bias (Qwen2), q, k and v have biases.
#pragma once

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
    {"rms1_w", "input_layernorm.weight", {C}},   {"q_w", "self_attn.q_proj.weight", {C, C}},
    {"k_w", "self_attn.k_proj.weight", {KV, C}}, {"v_w", "self_attn.v_proj.weight", {KV, C}},
    {"o_w", "self_attn.o_proj.weight", {C, C}},  {"rms2_w", "post_attention_layernorm.weight", {C}},
    {"gate_w", "mlp.gate_proj.weight", {F, C}},  {"up_w", "mlp.up_proj.weight", {F, C}},
    {"down_w", "mlp.down_proj.weight", {C, F}},
};

// Qwen2's block (the spec's qkv_bias): llama's tensors with a bias after each
// of q's, k's and v's weights (o has none), each bias in its weight's piece.
inline constexpr Tensor kLlamaQkvBiasBlockParams[] = {
    kLlamaBlockParams[0],
    kLlamaBlockParams[1],
    {"q_b", "self_attn.q_proj.bias", {C}},
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
    {"q", Elem::Param, C, When::Always, 1},
    {"k", Elem::Param, KV, When::Always, 2},
    {"v", Elem::Param, KV, When::Always, 3},
    {"attn", Elem::Param, C, When::Always, 3},
    {"res2", Elem::Param, C, When::Always, 4},
    {"rms2", Elem::Param, C, When::Always, 5},
    {"gate", Elem::Param, F, When::Always, 6},
    {"up", Elem::Param, F, When::Always, 7},
    {"swiglu", Elem::Param, F, When::Always, 7},
    {"probs", Elem::Param, Probs, When::Materialized, 3},
};

inline constexpr Field kLlamaFinalNormSaved[] = {
    {"rstd", Elem::Fp32, One},
    {"input", Elem::Param, C},
    {"output", Elem::Param, C},
};

// As gpt2's (runtime/model/gpt2.h), with the largest intermediate gradient also
// covering d(gate), d(up), d(swiglu) and d(q), d(k), d(v).
inline constexpr Field kLlamaBackwardScratch[] = {
    {"dres", Elem::Param, C},
    {"dtmp", Elem::Param, C},
    {"big", Elem::Param, max_of(3 * C + Probs, 3 * F, C + 2 * KV)},
    {"delta", Elem::Fp32, H, When::Flash},
};

// A block's pieces (Piece, runtime/model/layout.h): runtime/llama runs any range of them.
inline constexpr Piece kLlamaBlockPieces[] = {
    {"input_layernorm", 0, 1},         {"self_attn.q_proj", 1, 1, C, C},
    {"self_attn.k_proj", 2, 1, C, KV}, {"self_attn.v_proj", 3, 1, C, KV, true},
    {"self_attn.o_proj", 4, 1, C, C},  {"post_attention_layernorm", 5, 1},
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

// The family's tensors: Qwen2's with qkv_bias, else Llama's.
constexpr const ParamLayout& llama_params(bool qkv_bias) {
  return qkv_bias ? kLlamaQkvBiasParams : kLlamaParams;
}

inline constexpr ActivationLayout kLlamaActivations{kLlamaBlockSaved, kLlamaFinalNormSaved,
                                                    kLlamaBackwardScratch};

}  // namespace fsdpgen::model
