// Flops: floating-point operations of each segment's forward for one
// micro-batch of N tokens (backward is twice the forward; recompute repeats
// the forward). Matrix multiplies count 2 per multiply-add; attention counts
// the full T x T score and value products (4*T*C per token), as MFU
// conventions (PaLM, Megatron) do; element-wise work is not counted.
#pragma once

#include <cstdint>

#include "codegen/planner/Lower.h"

namespace fsdpgen {

// What the hardware executes: the head's GEMM over the padded vocabulary
// (ModelSpec::padded_vocab()), which is what the step's time is predicted from.
double segment_forward_flops(const ModelSpec& m, const Segment& s, int64_t tokens);
// The same for one layer.
double layer_forward_flops(const ModelSpec& m, const LayerId& l, int64_t tokens);

// Model FLOPs per token of one training step (forward + backward):
// 6 * (non-embedding matmul parameters + head) + 12 * L * T * C attention,
// the head over the true vocabulary: MFU counts the model's FLOPs, not the
// padded columns' (as llm.c and PaLM's MFU do).
double model_flops_per_token(const ModelSpec& m);

}  // namespace fsdpgen
