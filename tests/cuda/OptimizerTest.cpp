// OptimizerTest (cuda): the CUDA optimizer (step_optimizer with a gpu_exec, the path
// generated binaries take, and the optimizer_adamw launcher) on the hand-derived
// cases of tests/runtime/OptimizerCases.h, against PyTorch's definitions
// written out there rather than the CPU optimizer. Skips, saying why, where no
// CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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

}  // namespace
