// loss_scale: dynamic loss scaling for fp16 (PyTorch's GradScaler, applied
// to the whole sharded step). fp16 holds magnitudes from 6e-8 to 65504, too
// narrow for small gradients, so the loss gradient is multiplied by a scale S
// before backward and the gradients are divided by it in the optimizer. A step
// whose gradients overflowed (a non-finite global norm, the same on every
// rank) is skipped: no weight, optimizer state or step count changes, and S
// halves. After `interval` finite steps in a row S doubles. A static scale
// (the spec's `loss_scale = static(S)`) never changes; overflowed steps are
// still skipped.
//
// Averaging: gradients are summed over the data-parallel ranks. With fp16 the
// 1/world of the average is split (PyTorch FSDP's pre/post divide): each rank's
// gradient is pre-divided by `pre` before the reduction (through the loss
// gradient) and the remaining 1/post is divided out with S in the optimizer,
// so neither the per-rank gradients underflow nor their sum overflows.
#pragma once

#include <cstdint>

#include "runtime/program.h"

struct loss_scaler {
  bool enabled = false;       // param or reduce dtype is fp16
  bool dynamic = true;        // backs off and grows (else static)
  int64_t interval = 2000;    // finite steps between growths
  double scale = 1;           // S (1 when disabled)
  double post_divide = 1;     // world / pre (1 when disabled)
  int64_t finite_steps = 0;   // finite steps since S last changed
  int64_t applied_steps = 0;  // steps the optimizer applied (skipped ones do not count)
};

// PyTorch GradScaler's factors (its initial scale 2^16 and interval 2000
// are the spec's defaults).
inline constexpr double kLossScaleGrowth = 2;
inline constexpr double kLossScaleBackoff = 0.5;

// From the program's parallel.precision.loss_scale.
loss_scaler loss_scaler_start(const program& p);

// The pre-divide factor for `world` data-parallel ranks, as PyTorch FSDP
// chooses it: f doubles from 1 while f divides world and world / f > f
// (about sqrt(world): 1, 2, 2, 4 for worlds 1, 2, 4, 8).
int64_t loss_scale_predivide(int64_t world);

// What the step multiplies the mean loss's gradient by: the gradients as
// reduced hold grad_scale times the true average gradient.
inline double loss_scaler_grad_scale(const loss_scaler& s) {
  return s.scale * s.post_divide;
}

// After a step: counts an applied step, or backs off after a skipped one;
// grows S after `interval` finite steps (when enabled and dynamic).
void loss_scaler_update(loss_scaler& s, bool skipped);
