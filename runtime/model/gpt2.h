// gpt2 layout: the gpt2 family's tables (runtime/model/layout.h): a block's parameter
// tensors and saved arrays, the final norm's saved arrays and the backward
// scratch. The planner totals them, runtime/gpt2.h carves them.
#pragma once

#include "runtime/model/layout.h"

namespace fsdpgen::model {

// The embedding (token and position), the final LayerNorm and an untied head.
inline constexpr Tensor kGpt2EmbedParams[] = {
    {"wte", "transformer.wte.weight", {Vocab, C}, true},
    {"wpe", "transformer.wpe.weight", {Context, C}},
};
inline constexpr Tensor kGpt2FinalNormParams[] = {
    {"lnf_w", "transformer.ln_f.weight", {C}},
    {"lnf_b", "transformer.ln_f.bias", {C}},
};
inline constexpr Tensor kGpt2HeadParams[] = {
    {"head_w", "lm_head.weight", {Vocab, C}, true},
};

// A block's tensors in flat-parameter order (GPT-2's Conv1D: weights are (in, out)).
inline constexpr Tensor kGpt2BlockParams[] = {
    {"ln1_w", "ln_1.weight", {C}},
    {"ln1_b", "ln_1.bias", {C}},
    {"qkv_w", "attn.c_attn.weight", {C, 3 * C}},
    {"qkv_b", "attn.c_attn.bias", {3 * C}},
    {"proj_w", "attn.c_proj.weight", {C, C}},
    {"proj_b", "attn.c_proj.bias", {C}},
    {"ln2_w", "ln_2.weight", {C}},
    {"ln2_b", "ln_2.bias", {C}},
    {"fc_w", "mlp.c_fc.weight", {C, F}},
    {"fc_b", "mlp.c_fc.bias", {F}},
    {"fc2_w", "mlp.c_proj.weight", {F, C}},
    {"fc2_b", "mlp.c_proj.bias", {C}},
};

// What a block's forward saves, per token: the LayerNorm statistics, the
// stored activations, then the attention's probabilities (over (B, H) then
// positions) or, with flash attention, their log-sum-exp. Each row names the
// piece (kGpt2BlockPieces) that writes it.
inline constexpr Field kGpt2BlockSaved[] = {
    {"ln1_mean", Elem::Fp32, One, When::Always, 0},
    {"ln1_rstd", Elem::Fp32, One, When::Always, 0},
    {"ln2_mean", Elem::Fp32, One, When::Always, 3},
    {"ln2_rstd", Elem::Fp32, One, When::Always, 3},
    {"input", Elem::Param, C},
    {"ln1", Elem::Param, C, When::Always, 0},
    {"qkv", Elem::Param, 3 * C, When::Always, 1},
    {"attn", Elem::Param, C, When::Always, 1},
    {"res2", Elem::Param, C, When::Always, 2},
    {"ln2", Elem::Param, C, When::Always, 3},
    {"fc", Elem::Param, F, When::Always, 4},
    {"gelu", Elem::Param, F, When::Always, 4},
    {"probs", Elem::Param, Probs, When::Materialized, 1},
    {"lse", Elem::Fp32, H, When::Flash, 1},
};

inline constexpr Field kGpt2FinalNormSaved[] = {
    {"mean", Elem::Fp32, One},
    {"rstd", Elem::Fp32, One},
    {"input", Elem::Param, C},
    {"output", Elem::Param, C},
};

// The gradients flowing through backward, per token: the residual stream's
// (updated in place layer by layer), a second (N, C), one array for the
// largest intermediate gradient (d(qkv) and d(probs); or d(gelu) and d(fc)),
// and with flash attention rowsum(d(attn) * attn) per head.
inline constexpr Field kGpt2BackwardScratch[] = {
    {"dres", Elem::Param, C},
    {"dtmp", Elem::Param, C},
    {"big", Elem::Param, max_of(3 * C + Probs, 2 * F)},
    {"delta", Elem::Fp32, H, When::Flash},
};

// A block's pieces (Piece, runtime/model/layout.h): runtime/gpt2 runs any range of them.
inline constexpr Piece kGpt2BlockPieces[] = {
    {"ln_1", 0, 2},
    {"attn.c_attn", 2, 2, C, 3 * C, true},
    {"attn.c_proj", 4, 2, C, C},
    {"ln_2", 6, 2},
    {"mlp.c_fc", 8, 2, C, F},
    {"mlp.c_proj", 10, 2, F, C},
};

// The modules a custom layer can replace (Module, runtime/model/layout.h).
inline constexpr Module kGpt2Modules[] = {
    {"ln_1", 0, 1, "input", "ln1", nullptr, false},
    {"attn", 1, 3, "ln1", "res2", "input", true},
    {"ln_2", 3, 4, "res2", "ln2", nullptr, false},
    {"mlp", 4, 6, "ln2", nullptr, "res2", true},
    {"after_mlp", 6, 6, nullptr, nullptr, nullptr, false},
};

inline constexpr ParamLayout kGpt2Params{"transformer.h.{}.",  kGpt2EmbedParams, kGpt2BlockParams,
                                         kGpt2FinalNormParams, kGpt2HeadParams,  kGpt2BlockPieces,
                                         kGpt2Modules};

inline constexpr ActivationLayout kGpt2Activations{kGpt2BlockSaved, kGpt2FinalNormSaved,
                                                   kGpt2BackwardScratch};

}  // namespace fsdpgen::model
