// OptimizerTest: the optimizer step (step_optimizer: AdamW, SGD with momentum,
// weight decay ranges, gradient scale, clipping, skipped steps), the
// learning-rate schedules and the clip factor against PyTorch's definitions
// written out in the test (OptimizerCases.h) and values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/cpu/step.h"
#include "runtime/optimizer.h"
#include "tests/runtime/OptimizerCases.h"

namespace {

using optim::optimizer_case;

// ---------------------------------------------------------------- optimizer steps

class OptimizerStep : public testing::TestWithParam<optimizer_case> {};

// Each step as train.cpp runs it: the gradient norm from the stored shard,
// the step's learning rate, and the count of applied steps (this one
// included) for AdamW's bias correction and SGD's first momentum step.
TEST_P(OptimizerStep, FollowsPyTorch) {
  const optimizer_case& oc = GetParam();
  const optim::case_program cp(oc);
  step_context c;
  c.p = &cp.get();
  c.decay_ranges = cp.decay_ranges();
  c.decay_range_counts = cp.decay_range_counts();
  std::vector<float> params = oc.params;
  std::vector<float> state(static_cast<size_t>(optim::state_elems(oc)), 0.0f);
  const std::vector<optim::optimizer_state> want = optim::reference_run(oc);
  int64_t applied = 0;
  for (int step = 0; step < optim::steps(oc); ++step) {
    const std::vector<float> grad = optim::stored_grad(oc, step);
    c.lr = oc.lrs[static_cast<size_t>(step)];
    c.grad_scale = oc.grad_scale;
    c.optimizer_step = applied + 1;
    c.grad_norm_partial = 0;
    step_add_grad_norm(c, grad.data(), dtype_id::fp32, optim::elems(oc));
    step_optimizer(c, 0, params.data(), nullptr, state.data(), grad.data());
    if (optim::step_applies(oc, step)) ++applied;
    optim::expect_step_matches(oc, step, params, state, want[static_cast<size_t>(step)]);
  }
  optim::expect_hand_values(oc, params);
}

INSTANTIATE_TEST_SUITE_P(Cases, OptimizerStep, testing::ValuesIn(optim::optimizer_cases()),
                         optim::CaseName());

// ---------------------------------------------------------------- learning-rate schedule

// optimizer_lr in double against values written out below: a few roundings
// of numbers ~1e-3 (~1e-19 each), far inside 1e-15.
constexpr double kLrTol = 1e-15;
constexpr double kLr = 1e-3, kMinLr = 1e-4;

// 10 warm-up steps, then 100 steps of decay: step 10 starts it, step 60 is
// its midpoint and step 110 the last step.
program schedule(lr_schedule_kind kind, int64_t warmup = 10, int64_t steps = 111) {
  program p{};
  p.train.optimizer.lr = kLr;
  p.train.lr_schedule.min_lr = kMinLr;
  p.train.lr_schedule.kind = kind;
  p.train.lr_schedule.warmup = warmup;
  p.train.steps = steps;
  return p;
}

// Linear from 0: step s of the warm-up gets lr * (s + 1) / warmup, so its
// last step reaches lr.
TEST(OptimizerLr, WarmupRisesLinearlyToLr) {
  for (const lr_schedule_kind kind :
       {lr_schedule_kind::constant, lr_schedule_kind::cosine, lr_schedule_kind::linear}) {
    const program p = schedule(kind);
    EXPECT_NEAR(optimizer_lr(p, 0, p.train.steps), 1e-4, kLrTol);
    EXPECT_NEAR(optimizer_lr(p, 4, p.train.steps), 5e-4, kLrTol);
    EXPECT_NEAR(optimizer_lr(p, 9, p.train.steps), kLr, kLrTol);
    EXPECT_NEAR(optimizer_lr(p, 10, p.train.steps), kLr, kLrTol) << "the decay starts from lr";
  }
}

// lr = min + (lr - min) * (1 + cos(pi * r)) / 2, r the fraction of the decay done.
TEST(OptimizerLr, CosineEndPointsAndMidpoint) {
  const program p = schedule(lr_schedule_kind::cosine);
  EXPECT_NEAR(optimizer_lr(p, 60, p.train.steps), (kLr + kMinLr) / 2, kLrTol);
  // r = 1/4: (1 + cos(pi/4)) / 2 = 0.8535533905932737; 1e-4 + 9e-4 * that.
  EXPECT_NEAR(optimizer_lr(p, 35, p.train.steps), 8.681980515339464e-4, kLrTol);
  EXPECT_NEAR(optimizer_lr(p, 110, p.train.steps), kMinLr, kLrTol) << "the last step reaches min";
  EXPECT_NEAR(optimizer_lr(p, 150, p.train.steps), kMinLr, kLrTol) << "and stays there";
  for (int64_t s = 10; s < 110; ++s)
    EXPECT_LT(optimizer_lr(p, s + 1, p.train.steps), optimizer_lr(p, s, p.train.steps))
        << "step " << s;
}

TEST(OptimizerLr, LinearEndPointsAndMidpoint) {
  const program p = schedule(lr_schedule_kind::linear);
  EXPECT_NEAR(optimizer_lr(p, 60, p.train.steps), (kLr + kMinLr) / 2, kLrTol);
  EXPECT_NEAR(optimizer_lr(p, 35, p.train.steps), kMinLr + 0.75 * (kLr - kMinLr), kLrTol);
  EXPECT_NEAR(optimizer_lr(p, 110, p.train.steps), kMinLr, kLrTol);
  // Equal decrements of (lr - min) / 100 = 9e-6 per step.
  for (int64_t s = 10; s < 110; ++s)
    EXPECT_NEAR(optimizer_lr(p, s, p.train.steps) - optimizer_lr(p, s + 1, p.train.steps), 9e-6,
                kLrTol)
        << "step " << s;
}

TEST(OptimizerLr, ConstantAfterWarmup) {
  const program p = schedule(lr_schedule_kind::constant);
  for (const int64_t s : {10, 60, 110})
    EXPECT_EQ(optimizer_lr(p, s, p.train.steps), kLr) << "step " << s;
}

TEST(OptimizerLr, NoWarmupStartsAtLr) {
  const program p = schedule(lr_schedule_kind::cosine, 0, 101);
  EXPECT_EQ(optimizer_lr(p, 0, p.train.steps), kLr);
  EXPECT_NEAR(optimizer_lr(p, 50, p.train.steps), (kLr + kMinLr) / 2, kLrTol);
  EXPECT_NEAR(optimizer_lr(p, 100, p.train.steps), kMinLr, kLrTol);
}

// ---------------------------------------------------------------- clipping

program clipping_at(double clip) {
  program p{};
  p.train.clip = clip;
  return p;
}

// torch.nn.utils.clip_grad_norm_ multiplies by min(1, clip / (norm + 1e-6)),
// computed here in double and compared within 4 fp32 ulps (EXPECT_FLOAT_EQ).
TEST(OptimizerClip, ScalesAsPyTorchClipGradNorm) {
  const program p = clipping_at(1.0);
  EXPECT_FLOAT_EQ(optimizer_clip_scale(p, 2.0), 1.0 / (2.0 + 1e-6));  // 0.49999975
  EXPECT_FLOAT_EQ(optimizer_clip_scale(p, 1.3), 1.0 / (1.3 + 1e-6));
  EXPECT_FLOAT_EQ(optimizer_clip_scale(clipping_at(0.5), 4.0), 0.5 / (4.0 + 1e-6));
  // At the clip norm itself: 1 / (1 + 1e-6) = 0.999999, about 17 ulps below 1.
  EXPECT_FLOAT_EQ(optimizer_clip_scale(p, 1.0), 1.0 / (1.0 + 1e-6));
}

TEST(OptimizerClip, BelowTheClipNormGradientsAreUnchanged) {
  const program p = clipping_at(1.0);
  EXPECT_EQ(optimizer_clip_scale(p, 0.5), 1.0f);
  EXPECT_EQ(optimizer_clip_scale(p, 0.0), 1.0f);
}

TEST(OptimizerClip, NoneNeverScales) {
  EXPECT_EQ(optimizer_clip_scale(clipping_at(0), 100.0), 1.0f);
}

// Reduced gradients hold grad_scale x the average: the norm divides it out.
// 1.69 * 1024^2 is the sum of squares of (0.3, -0.4, 1.2) x 1024; the fp32
// rounding of 1.69 (< 6e-8 relative) bounds the error.
TEST(OptimizerClip, GlobalNormDividesTheGradScale) {
  EXPECT_NEAR(step_global_norm(1.69f * 1024 * 1024, 1024), 1.3, 1e-7);
  EXPECT_FALSE(std::isfinite(step_global_norm(INFINITY, 65536)));
}

// Which elements of a rank's shard decay: the weights of two or more dims
// (GPT-2 names), cut at the shard's bounds, as offsets in the shard. Two
// units over a shard group of 2; the ranges are worked out by hand below.
TEST(OptimizerDecay, RangesAreTheMatricesInEachShard) {
  // Unit 0: wte (2 x 3, elements 0-5, decays) and ln_f (4, elements 6-9, no
  // decay), padded to 12: rank 0 holds [0, 6), rank 1 [6, 12).
  // Unit 1: c_attn (2 x 2, 0-3), its bias (2, 4-5), c_fc (1 x 4, 6-9),
  // padded to 10: rank 0 holds [0, 5), rank 1 [5, 10).
  const program_tensor tensors[] = {
      {"transformer.wte.weight", 0, 0, 2, 3},
      {"transformer.ln_f.weight", 0, 6, 4, 0},
      {"transformer.h.0.attn.c_attn.weight", 1, 0, 2, 2},
      {"transformer.h.0.attn.c_attn.bias", 1, 4, 2, 0},
      {"transformer.h.0.mlp.c_fc.weight", 1, 6, 1, 4},
  };
  program_unit units[2]{};
  units[0].param_elems = 10;
  units[0].padded_elems = 12;
  units[0].shard_elems = 6;
  units[0].first_tensor = 0;
  units[0].tensor_count = 2;
  units[1].param_elems = 10;
  units[1].padded_elems = 10;
  units[1].shard_elems = 5;
  units[1].first_tensor = 2;
  units[1].tensor_count = 3;
  program p{};
  p.tensors = tensors;
  p.tensor_count = 5;
  p.units = units;
  p.unit_count = 2;
  const optimizer_decay_table rank0 = optimizer_decay_ranges(p, 0);
  const optimizer_decay_table rank1 = optimizer_decay_ranges(p, 1);
  using ranges = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(rank0.ranges, (ranges{{0, 6}, {0, 4}}));  // wte; c_attn (its bias is not)
  EXPECT_EQ(rank1.ranges, (ranges{{}, {1, 5}}));      // ln_f is not; c_fc from element 6
  ASSERT_EQ(rank1.counts.size(), 2u);
  EXPECT_EQ(rank1.counts[0], 0);
  EXPECT_EQ(rank1.counts[1], 1);
  EXPECT_EQ(rank1.pointers[1], rank1.ranges[1].data());
}

// ---------------------------------------------------------------- the run's own length

// --steps N: the schedule follows the run, not the spec. The spec says 111
// steps; runs of 31 and of 211 steps decay over their own 20 and 200 steps
// after the same 10 warm-up steps, reaching min at their step N - 1.
TEST(OptimizerLr, DecayEndsAtTheLastStepOfTheRunNotOfTheSpec) {
  for (const lr_schedule_kind kind : {lr_schedule_kind::cosine, lr_schedule_kind::linear}) {
    const program p = schedule(kind);  // p.train.steps = 111
    for (const int64_t total : {31, 211}) {
      const int64_t last = total - 1, midpoint = 10 + (last - 10) / 2;
      EXPECT_NEAR(optimizer_lr(p, 4, total), 5e-4, kLrTol) << "the warm-up is the spec's";
      EXPECT_NEAR(optimizer_lr(p, 10, total), kLr, kLrTol);
      EXPECT_NEAR(optimizer_lr(p, midpoint, total), (kLr + kMinLr) / 2, kLrTol) << total;
      EXPECT_NEAR(optimizer_lr(p, last, total), kMinLr, kLrTol) << "the run's last step";
      EXPECT_GT(optimizer_lr(p, last - 1, total), kMinLr + 1e-9) << "and not before it";
    }
    // r = 1/4 of the 31-step run's 20 decay steps: step 15 (cosine as in
    // CosineEndPointsAndMidpoint, linear 3/4 of the way from min to lr).
    const double quarter =
        kind == lr_schedule_kind::cosine ? 8.681980515339464e-4 : kMinLr + 0.75 * (kLr - kMinLr);
    EXPECT_NEAR(optimizer_lr(p, 15, 31), quarter, kLrTol);
  }
}

TEST(OptimizerLr, DescribedWithTheRunsSteps) {
  EXPECT_EQ(optimizer_lr_describe(schedule(lr_schedule_kind::cosine, 20, 200), 30),
            "20 warm-up steps to 0.001, then cosine down to 0.0001 at step 30, the last");
  EXPECT_EQ(optimizer_lr_describe(schedule(lr_schedule_kind::linear, 0, 200), 6),
            "0.001, then linear down to 0.0001 at step 6, the last");
  EXPECT_EQ(optimizer_lr_describe(schedule(lr_schedule_kind::constant, 10, 200), 30),
            "10 warm-up steps to 0.001, then constant");
  EXPECT_EQ(optimizer_lr_describe(schedule(lr_schedule_kind::cosine, 10, 200), 10),
            "10 warm-up steps to 0.001, the whole run");
}

// Under Muon the banner gives the nested AdamW's lr and floor too: the
// same schedule at its ratio to Muon's lr.
TEST(OptimizerLr, MuonDescribesTheNestedAdamwsLrAndFloor) {
  program p = schedule(lr_schedule_kind::cosine, 20, 200);
  p.train.optimizer.kind = optimizer_kind::muon;
  p.train.optimizer.lr = 0.02;
  p.train.optimizer.adamw_lr = 3e-4;
  p.train.lr_schedule.min_lr = 0.002;
  EXPECT_EQ(optimizer_lr_describe(p, 200),
            "20 warm-up steps to 0.02, then cosine down to 0.002 at step 200, the last; nested "
            "AdamW: 0.0003 down to 3e-05");
  p.train.lr_schedule.kind = lr_schedule_kind::constant;
  EXPECT_EQ(optimizer_lr_describe(p, 200),
            "20 warm-up steps to 0.02, then constant; nested AdamW: 0.0003");
}

// A run shorter than the spec's warm-up (a smoke test: --steps 5) warms up
// over the whole run, reaching lr at its last step, and says so once.
TEST(OptimizerLr, ARunShorterThanTheWarmupClampsItToTheRun) {
  const program p = schedule(lr_schedule_kind::cosine, 10, 200);
  EXPECT_EQ(optimizer_warmup(p, 5), 5);
  EXPECT_EQ(optimizer_warmup(p, 10), 10);
  EXPECT_EQ(optimizer_warmup(p, 200), 10);
  EXPECT_EQ(optimizer_warmup(p, 0), 0);
  for (int64_t k = 0; k < 5; ++k)
    EXPECT_NEAR(optimizer_lr(p, k, 5), kLr * static_cast<double>(k + 1) / 5, kLrTol) << k;
  EXPECT_NEAR(optimizer_lr(p, 4, 5), kLr, kLrTol) << "the last step reaches lr";
  EXPECT_EQ(optimizer_lr_describe(p, 5),
            "5 warm-up steps (the spec's 10, clamped to the run) to 0.001, the whole run");
  EXPECT_EQ(optimizer_warmup_note(p, 5),
            "--steps 5: the run is shorter than the spec's warmup (10 steps); the warm-up is "
            "clamped to the run's 5 steps, reaching lr 0.001 at its last step");
  EXPECT_EQ(optimizer_warmup_note(p, 10), "") << "as long as the warm-up fits";
  EXPECT_EQ(optimizer_warmup_note(p, 0), "") << "0 steps train nothing";
}

}  // namespace
