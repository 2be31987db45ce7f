// grad_scaling (CUDA): the factor the optimizer multiplies the reduced
// gradients by, read from the step's device scalars so that a captured
// step replays with each step's values; one definition for the optimizer
// kernels of step.cu and Muon's (muon.cu).
#pragma once

#include <cmath>

#include "runtime/cuda/exec.h"
#include "runtime/optimizer_math.h"

// The clip factor (optimizer_clip_scale) over the loss scale; skip when the
// gradient norm is not finite or the loss-spike guard trips (the step is
// skipped: nothing changes).
struct grad_scaling {
  float scale;
  bool skip;
};
__device__ inline grad_scaling grad_scaling_of(const gpu_step_scalars* s, double clip) {
  const double norm = sqrt(static_cast<double>(s->norm_sq)) / s->loss_scale;
  if (optimizer_skips(norm, s->loss_total, s->norm_limit, s->loss_total_limit)) return {0.0f, true};
  const float clip_scale = clip > 0 ? static_cast<float>(fmin(1.0, clip / (norm + 1e-6))) : 1.0f;
  return {clip_scale / s->loss_scale, false};
}
