// OptimizerTest (cuda): the CUDA optimizer (step_optimizer with a gpu_exec, the path
// generated binaries take, and the optimizer_adamw launcher) on the hand-derived
// cases of tests/runtime/OptimizerCases.h, against PyTorch's definitions
// written out there rather than the CPU optimizer. Skips, saying why, where no
// CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/step.h"
#include "tests/cuda/Device.h"
#include "tests/runtime/OptimizerCases.h"

namespace {

using optim::optimizer_case;

class CudaOptimizer : public CudaFixture, public testing::WithParamInterface<optimizer_case> {};

class CudaOptimizerStep : public CudaOptimizer {};
class CudaAdamw : public CudaOptimizer {};

// Each step as the CUDA executor runs it: the step's scalars (learning rate,
// count of applied steps with this one, loss scale) uploaded, the gradient
// norm summed on the device from the stored gradients, then the optimizer,
// which reads the clip factor and the skip from them.
TEST_P(CudaOptimizerStep, FollowsPyTorch) {
  const optimizer_case& oc = GetParam();
  const optim::case_program cp(oc);
  const int64_t n = optim::elems(oc);
  device_vec<float> params_d(oc.params), state_d(optim::state_elems(oc));
  device_vec<float> norm_scratch_d(kReduceScratchFloats);
  device_vec<gpu_step_scalars> scalars_d(1);
  gpu_context gc;
  gc.exec.stream = stream;
  gc.exec.scalars = scalars_d.get();
  gc.exec.norm_scratch = norm_scratch_d.get();
  gc.decay_ranges = cp.decay_ranges();
  gc.decay_range_counts = cp.decay_range_counts();
  step_context c;
  c.p = &cp.get();
  c.gpu = &gc;
  const std::vector<optim::optimizer_state> want = optim::reference_run(oc);
  int64_t applied = 0;
  std::vector<float> params;
  for (int step = 0; step < optim::steps(oc); ++step) {
    device_vec<float> grad_d(optim::stored_grad(oc, step));
    gpu_step_scalars s{};
    s.lr = static_cast<float>(oc.lrs[static_cast<size_t>(step)]);
    s.t = static_cast<float>(applied + 1);
    s.loss_scale = oc.grad_scale;
    CUDA_CHECK(cudaMemcpy(scalars_d.get(), &s, sizeof(s), cudaMemcpyHostToDevice));
    step_add_grad_norm(c, grad_d.get(), dtype_id::fp32, n, gpu(c));
    step_optimizer(c, 0, params_d.get(), nullptr, state_d.get(), grad_d.get(), gpu(c));
    sync();
    if (optim::step_applies(oc, step)) ++applied;
    params = params_d.download();
    optim::expect_step_matches(oc, step, params, state_d.download(),
                               want[static_cast<size_t>(step)]);
  }
  optim::expect_hand_values(oc, params);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaOptimizerStep, testing::ValuesIn(optim::optimizer_cases()),
                         optim::CaseName());

// The case's elements as maximal runs that decay alike.
struct decay_run {
  int64_t begin, end;
  bool decay;
};
std::vector<decay_run> decay_runs(const optimizer_case& oc) {
  std::vector<decay_run> runs;
  for (int64_t i = 0; i < optim::elems(oc); ++i) {
    const bool decay = optim::decays(oc, i);
    if (runs.empty() || runs.back().decay != decay) runs.push_back({i, i, decay});
    runs.back().end = i + 1;
  }
  return runs;
}

// The launcher takes the step number, the decay flag per range and the
// gradient's scale (the clip factor over grad_scale) from its caller: applied
// here to each run of elements that decay alike, skipped steps left out.
TEST_P(CudaAdamw, FollowsPyTorch) {
  const optimizer_case& oc = GetParam();
  const int64_t n = optim::elems(oc);
  device_vec<float> params_d(oc.params), state_d(optim::state_elems(oc));
  const std::vector<optim::optimizer_state> want = optim::reference_run(oc);
  int64_t applied = 0;
  std::vector<float> params;
  for (int step = 0; step < optim::steps(oc); ++step) {
    device_vec<float> grad_d(optim::stored_grad(oc, step));
    if (optim::step_applies(oc, step)) {
      ++applied;
      const auto scale = static_cast<float>(optim::reference_clip_coef(oc, step) / oc.grad_scale);
      for (const decay_run& r : decay_runs(oc))
        optimizer_adamw(
            params_d.get(), state_d.get(), state_d.get() + n, grad_d.get(), dtype_id::fp32, r.begin,
            r.end, static_cast<float>(oc.lrs[static_cast<size_t>(step)]),
            static_cast<float>(oc.beta1), static_cast<float>(oc.beta2), static_cast<float>(oc.eps),
            static_cast<float>(oc.weight_decay), r.decay, applied, scale, stream);
      sync();
    }
    params = params_d.download();
    optim::expect_step_matches(oc, step, params, state_d.download(),
                               want[static_cast<size_t>(step)]);
  }
  optim::expect_hand_values(oc, params);
}

std::vector<optimizer_case> adamw_cases() {
  std::vector<optimizer_case> cases;
  for (const optimizer_case& c : optim::optimizer_cases())
    if (c.kind == optimizer_kind::adamw) cases.push_back(c);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaAdamw, testing::ValuesIn(adamw_cases()), optim::CaseName());

// A unit whose shard has more decay ranges than one launch carries (300
// ranges of 3 decayed elements, gaps of 3 between), fp32 master and bf16
// params: each element's update against a direct per-element reference
// (AdamW's and SGD's rules, decayed where a range covers it), and the bf16
// params the master's rounding. Weight decay of 0.5 at lr 0.01 moves a
// decayed value 0.5% away from an undecayed one, far beyond the tolerance.
class CudaOptimizerRanges : public CudaFixture {};

TEST_F(CudaOptimizerRanges, ManyDecayRanges) {
  constexpr int kRanges = 300;
  constexpr int64_t n = 6 * kRanges + 5;
  std::vector<int64_t> ranges;
  for (int r = 0; r < kRanges; ++r) {
    ranges.push_back(6 * r + 2);
    ranges.push_back(6 * r + 5);
  }
  const auto decayed = [&](int64_t i) { return i < 6 * kRanges && i % 6 >= 2 && i % 6 < 5; };
  for (const optimizer_kind kind : {optimizer_kind::adamw, optimizer_kind::sgd}) {
    std::vector<float> master(n), grad(n), m(n, 0.01f), v(n, 0.02f);
    for (int64_t i = 0; i < n; ++i) {
      master[i] = 1.0f + 0.001f * static_cast<float>(i % 17);
      grad[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
    }
    program_unit unit{};
    unit.name = "unit";
    unit.param_elems = unit.padded_elems = unit.shard_elems = n;
    unit.grad_shard_dtype = dtype_id::fp32;
    program p{};
    p.parallel.world = p.parallel.shard_group = 1;
    p.parallel.precision.param = dtype_id::bf16;
    p.parallel.precision.master = p.parallel.precision.reduce = dtype_id::fp32;
    p.train.optimizer = {kind, 0.01, 0.9, 0.95, 1e-8, 0.5, 0.9};
    p.units = &unit;
    p.unit_count = 1;
    const int64_t* range_table = ranges.data();
    const int count = kRanges;

    std::vector<float> state(2 * n);
    std::copy(m.begin(), m.end(), state.begin());
    std::copy(v.begin(), v.end(), state.begin() + n);
    device_vec<float> master_d(master), state_d(state), grad_d(grad),
        norm_scratch(kReduceScratchFloats);
    device_vec<bf16> param_d(n);
    device_vec<gpu_step_scalars> scalars_d(1);
    gpu_step_scalars sc{};
    sc.lr = 0.01f;
    sc.t = 2.0f;  // AdamW's bias corrections of a second step; SGD's momentum not its first
    sc.loss_scale = 1.0f;
    CUDA_CHECK(cudaMemcpy(scalars_d.get(), &sc, sizeof(sc), cudaMemcpyHostToDevice));
    gpu_context gc;
    gc.exec.stream = stream;
    gc.exec.scalars = scalars_d.get();
    gc.exec.norm_scratch = norm_scratch.get();
    gc.decay_ranges = &range_table;
    gc.decay_range_counts = &count;
    step_context c;
    c.p = &p;
    c.gpu = &gc;
    step_optimizer(c, 0, param_d.get(), master_d.get(), state_d.get(), grad_d.get(), gpu(c));
    sync();
    const std::vector<float> got = master_d.download(), got_state = state_d.download();
    const std::vector<bf16> got_param = param_d.download();
    const char* name = kind == optimizer_kind::adamw ? "adamw" : "sgd";
    for (int64_t i = 0; i < n; ++i) {
      const double wd = decayed(i) ? 0.5 : 0.0, g = grad[i], lr = 0.01;
      double want = master[i], want_m = m[i];
      if (kind == optimizer_kind::adamw) {
        const double mi = 0.9 * m[i] + 0.1 * g, vi = 0.95 * v[i] + 0.05 * g * g;
        want = master[i] * (1 - lr * wd) -
               lr * (mi / (1 - 0.9 * 0.9)) / (std::sqrt(vi / (1 - 0.95 * 0.95)) + 1e-8);
        want_m = mi;
      } else {
        want_m = 0.9 * m[i] + g + wd * master[i];
        want = master[i] - lr * want_m;
      }
      ASSERT_NEAR(got[i], want, 2e-6 * std::abs(want)) << name << " master at " << i;
      ASSERT_NEAR(got_state[i], want_m, 2e-6 * std::abs(want_m) + 1e-9)
          << name << " state at " << i;
      ASSERT_EQ(bf16_from_float(got[i]).bits, got_param[i].bits) << name << " param at " << i;
    }
  }
}

}  // namespace
