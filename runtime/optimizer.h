// optimizer: learning-rate schedules and the update rules on flat fp32
// shards. AdamW and SGD with momentum follow PyTorch's definitions
// (torch.optim.AdamW with bias correction and decoupled weight decay;
// torch.optim.SGD with L2 weight decay and momentum buffer b = mu*b + g,
// first step b = g). Weight decay applies to tensors of two or more dims.
// Gradients are scaled by the clip factor as they are read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/program.h"

// The warm-up of a run of `total_steps`: the spec's, clamped to the run (a
// smoke test shorter than the warm-up warms up over the whole run, as
// torchtitan does; optimizer_warmup_note says so once).
int64_t optimizer_warmup(const program& p, int64_t total_steps);

// The learning rate of 0-based `step` of a run of `total_steps` (--steps or
// the spec's, also when resumed): linear warm-up from 0 over
// optimizer_warmup steps, then constant, or cosine / linear decay reaching
// min_lr at step total_steps - 1.
double optimizer_lr(const program& p, int64_t step, int64_t total_steps);

// The schedule in words for the banner, e.g. "20 warm-up steps to 0.001,
// then cosine down to 0.0001 at step 30, the last" (steps 1-based, as logged);
// under Muon followed by the nested AdamW's, e.g. "; nested AdamW: 0.0003
// down to 3e-05".
std::string optimizer_lr_describe(const program& p, int64_t total_steps);

// The warning for a run of `steps` (--steps) shorter than the spec's warm-up,
// which is clamped to it, or "" when the warm-up fits. 0 steps train nothing
// and have no schedule.
std::string optimizer_warmup_note(const program& p, int64_t steps);

// Per unit, the element ranges of shard `shard_rank`'s flat shard that weight
// decay applies to (init_tensor_decays: the randomly initialized tensors), as
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
