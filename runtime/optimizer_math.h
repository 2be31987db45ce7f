// optimizer_math: one value's update by each optimizer rule, one definition
// for the CPU optimizer (runtime/optimizer.cpp) and its CUDA twin
// (runtime/cuda/step.cu). PyTorch's definitions, fp32 throughout.
#pragma once

#include <cmath>

#include "runtime/host_device.h"

// Whether the optimizer leaves a step out (nothing changes): its gradients
// are not finite (an fp16 overflow), or the loss-spike guard (runtime/train/guard.h)
// trips on the step's global norm or on its loss summed over every rank
// (limits +inf: that check is off). One rule for the optimizer's gate on
// either machine and for the loop that reports it.
FSDPGEN_HOST_DEVICE bool optimizer_skips(double norm, float loss_total, float norm_limit,
                                         float loss_total_limit) {
  using namespace std;  // isfinite: std's on the host, CUDA's on the device
  return !isfinite(norm) || norm > norm_limit || loss_total > loss_total_limit;
}

// AdamW (torch.optim.AdamW): g the scaled gradient, c1 and c2 the bias
// corrections 1 - beta^t, wd 0 where weight decay does not apply (decoupled:
// the parameter shrinks by lr * wd before the step).
FSDPGEN_HOST_DEVICE void adamw_update(float& master, float& m, float& v, float g, float lr,
                                      float beta1, float beta2, float c1, float c2, float eps,
                                      float wd) {
  const float mi = beta1 * m + (1.0f - beta1) * g;
  const float vi = beta2 * v + (1.0f - beta2) * g * g;
  m = mi;
  v = vi;
  const float p = master * (1.0f - lr * wd);
  master = p - lr * (mi / c1) / (sqrtf(vi / c2) + eps);
}

// SGD (torch.optim.SGD): weight decay as L2 added to the gradient, then
// momentum (momentum_buf null: none) whose buffer starts as the first
// gradient, then the step.
FSDPGEN_HOST_DEVICE void sgd_update(float& master, float* momentum_buf, float g, float lr,
                                    float momentum, float wd, bool first_step) {
  if (wd != 0.0f) g += wd * master;
  if (momentum_buf) {
    const float b = first_step ? g : momentum * *momentum_buf + g;
    *momentum_buf = b;
    g = b;
  }
  master -= lr * g;
}
