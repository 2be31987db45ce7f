// optimizer: learning-rate schedules and the update rules on flat fp32
// shards. AdamW and SGD with momentum follow PyTorch's definitions
// (torch.optim.AdamW with bias correction and decoupled weight decay;
// torch.optim.SGD with L2 weight decay and momentum buffer b = mu*b + g,
// first step b = g). Weight decay applies to tensors of two or more dims.
// Gradients are scaled by the clip factor as they are read.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/program.h"

// The learning rate of 0-based `step`: linear warm-up from 0 over `warmup`
// steps, then constant, or cosine / linear decay reaching min_lr at the last step.
double optimizer_lr(const program& p, int64_t step);

// Per unit, the element ranges of shard `shard_rank`'s flat shard that weight
// decay applies to (init_weight_decays: weights of two or more dims), as
// [begin, end) pairs in shard order; pointers/counts view ranges for the
// step context.
struct optimizer_decay_table {
  std::vector<std::vector<int64_t>> ranges;
  std::vector<const int64_t*> pointers;
  std::vector<int> counts;
};
optimizer_decay_table optimizer_decay_ranges(const program& p, int64_t shard_rank);

// min(1, clip / (norm + 1e-6)); 1 when clipping is off.
float optimizer_clip_scale(const program& p, double norm);

// Updates master[begin, end) (fp32) from grad (dtype g) with AdamW; m and v
// are the state. decay says whether weight decay applies to this range.
// t is the 1-based step for bias correction.
void optimizer_adamw(float* master, float* m, float* v, const void* grad, dtype_id g, int64_t begin,
                     int64_t end, float lr, float beta1, float beta2, float eps, float weight_decay,
                     bool decay, int64_t t, float grad_scale);
void optimizer_sgd(float* master, float* momentum_buf, const void* grad, dtype_id g, int64_t begin,
                   int64_t end, float lr, float momentum, float weight_decay, bool decay,
                   bool first_step, float grad_scale);
