// LossScaleTest: the dynamic loss scaler (runtime/train/loss_scale.h) against
// PyTorch GradScaler's rules (init 2^16, x0.5 on a skipped step, x2 after 2000
// finite steps in a row) and FSDP's pre-divide factors.
#include <gtest/gtest.h>

#include "runtime/train/loss_scale.h"

namespace {

// PyTorch GradScaler's growth interval, the spec's default.
constexpr int64_t kInterval = 2000;

program with_dtypes(dtype_id param, dtype_id reduce, int64_t world) {
  program p{};
  p.parallel.precision.param = param;
  p.parallel.precision.reduce = reduce;
  p.parallel.world = world;
  p.parallel.precision.loss_scale.dynamic = true;
  p.parallel.precision.loss_scale.init = 65536;
  p.parallel.precision.loss_scale.interval = kInterval;
  return p;
}

TEST(LossScale, OnlyFp16Scales) {
  EXPECT_FALSE(loss_scaler_start(with_dtypes(dtype_id::fp32, dtype_id::fp32, 4)).enabled);
  EXPECT_FALSE(loss_scaler_start(with_dtypes(dtype_id::bf16, dtype_id::fp32, 4)).enabled);
  const loss_scaler a = loss_scaler_start(with_dtypes(dtype_id::fp16, dtype_id::fp32, 4));
  const loss_scaler b = loss_scaler_start(with_dtypes(dtype_id::fp32, dtype_id::fp16, 4));
  EXPECT_TRUE(a.enabled);
  EXPECT_TRUE(b.enabled);
  EXPECT_EQ(a.scale, 65536.0);
  EXPECT_EQ(a.post_divide, 2.0);  // world 4: pre 2, post 2
  EXPECT_EQ(loss_scaler_grad_scale(a), 131072.0);
  const loss_scaler off = loss_scaler_start(with_dtypes(dtype_id::bf16, dtype_id::bf16, 8));
  EXPECT_EQ(loss_scaler_grad_scale(off), 1.0) << "no scaling and no post-divide without fp16";
}

TEST(LossScale, PredivideAsPyTorchFsdp) {
  // torch.distributed.fsdp's _get_gradient_predivide_factor.
  const int64_t want[][2] = {{1, 1}, {2, 2},  {3, 2},  {4, 2}, {6, 4},
                             {8, 4}, {16, 4}, {32, 8}, {64, 8}};
  for (const auto& w : want)
    EXPECT_EQ(loss_scale_predivide(w[0]), w[1]) << "world " << w[0];
}

TEST(LossScale, BacksOffOnSkipAndGrowsAfterInterval) {
  loss_scaler s = loss_scaler_start(with_dtypes(dtype_id::fp16, dtype_id::fp16, 1));
  loss_scaler_update(s, false);
  loss_scaler_update(s, true);  // overflow
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.applied_steps, 1) << "a skipped step is not applied";
  loss_scaler_update(s, true);
  EXPECT_EQ(s.scale, 16384.0);
  for (int64_t i = 0; i < kInterval - 1; ++i)
    loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 16384.0) << "not yet: one finite step short of the interval";
  loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 32768.0);
  EXPECT_EQ(s.applied_steps, kInterval + 1);
  loss_scaler_update(s, true);  // the run of finite steps starts again
  for (int64_t i = 0; i < kInterval - 1; ++i)
    loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 16384.0);
}

TEST(LossScale, TheSpecSetsInitAndInterval) {
  program p = with_dtypes(dtype_id::fp16, dtype_id::fp32, 1);
  p.parallel.precision.loss_scale.init = 1024;
  p.parallel.precision.loss_scale.interval = 3;
  loss_scaler s = loss_scaler_start(p);
  EXPECT_EQ(s.scale, 1024.0);
  loss_scaler_update(s, false);
  loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 1024.0);
  loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 2048.0) << "grows after 3 finite steps";
}

TEST(LossScale, StaticScaleNeverChanges) {
  program p = with_dtypes(dtype_id::fp16, dtype_id::fp16, 2);
  p.parallel.precision.loss_scale.dynamic = false;
  p.parallel.precision.loss_scale.init = 128;
  loss_scaler s = loss_scaler_start(p);
  EXPECT_EQ(s.scale, 128.0);
  loss_scaler_update(s, true);
  EXPECT_EQ(s.scale, 128.0) << "no back-off";
  for (int64_t i = 0; i < kInterval + 1; ++i)
    loss_scaler_update(s, false);
  EXPECT_EQ(s.scale, 128.0) << "no growth";
  EXPECT_EQ(s.applied_steps, kInterval + 1) << "the skipped step is still not applied";
}

TEST(LossScale, DisabledScalerStillCountsAppliedSteps) {
  loss_scaler s = loss_scaler_start(with_dtypes(dtype_id::fp32, dtype_id::fp32, 2));
  loss_scaler_update(s, false);
  loss_scaler_update(s, true);
  loss_scaler_update(s, false);
  EXPECT_EQ(s.applied_steps, 2);
  EXPECT_EQ(s.scale, 1.0);
}

}  // namespace
