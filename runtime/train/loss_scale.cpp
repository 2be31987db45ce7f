// loss_scale: the scaler's state machine and the pre/post divide split.
#include "runtime/train/loss_scale.h"

int64_t loss_scale_predivide(int64_t world) {
  int64_t f = 1;
  while (world % f == 0 && world / f > f)
    f *= 2;
  return f;
}

loss_scaler loss_scaler_start(const program& p) {
  loss_scaler s;
  s.enabled =
      p.parallel.precision.param == dtype_id::fp16 || p.parallel.precision.reduce == dtype_id::fp16;
  if (!s.enabled) return s;
  s.dynamic = p.parallel.precision.loss_scale.dynamic;
  s.interval = p.parallel.precision.loss_scale.interval;
  s.scale = p.parallel.precision.loss_scale.init;
  s.post_divide = static_cast<double>(p.parallel.world) /
                  static_cast<double>(loss_scale_predivide(p.parallel.world));
  return s;
}

void loss_scaler_update(loss_scaler& s, bool skipped) {
  if (!skipped) ++s.applied_steps;
  if (!s.enabled || !s.dynamic) return;
  if (skipped) {
    s.scale *= kLossScaleBackoff;
    s.finite_steps = 0;
    return;
  }
  if (++s.finite_steps >= s.interval) {
    s.scale *= kLossScaleGrowth;
    s.finite_steps = 0;
  }
}
