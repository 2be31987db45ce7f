// OptimizerCases: hand-built optimizer steps that the CPU and CUDA optimizer
// tests share: one unit's shard, its gradients per step, and PyTorch's AdamW,
// SGD and clip_grad_norm_ written out plainly in double as the reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/program.h"

namespace optim {

// One unit's shard trained for a few steps. The gradients are the true ones;
// the step sees them stored times grad_scale, as reduced fp16 gradients hold
// the loss scale times the post-divide times the average.
struct optimizer_case {
  std::string name;
  optimizer_kind kind = optimizer_kind::adamw;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;  // adamw
  double momentum = 0;                           // sgd
  double weight_decay = 0;
  double clip = 0;                        // global gradient norm; 0: none
  float grad_scale = 1;                   // stored gradients = grad_scale x the true ones
  std::vector<double> lrs;                // per step
  std::vector<float> params;              // before the first step
  std::vector<std::vector<float>> grads;  // per step; a non-finite value skips the step
  std::vector<int64_t> decay_ranges;      // [begin, end) pairs of the elements that decay
  std::vector<double> hand_final;         // params after the last step, worked out by hand
};

inline int64_t elems(const optimizer_case& c) {
  return static_cast<int64_t>(c.params.size());
}
inline int steps(const optimizer_case& c) {
  return static_cast<int>(c.grads.size());
}
// Floats of optimizer state the runtime keeps per shard: AdamW's m then v,
// SGD's momentum buffer.
inline int64_t state_elems(const optimizer_case& c) {
  return c.kind == optimizer_kind::adamw ? 2 * elems(c) : elems(c);
}

inline bool decays(const optimizer_case& c, int64_t i) {
  for (size_t r = 0; r < c.decay_ranges.size(); r += 2)
    if (i >= c.decay_ranges[r] && i < c.decay_ranges[r + 1]) return true;
  return false;
}

// A step whose gradients are not all finite is skipped (GradScaler): nothing
// changes and it does not count as a step of the optimizer.
inline bool step_applies(const optimizer_case& c, int step) {
  for (float g : c.grads[static_cast<size_t>(step)])
    if (!std::isfinite(g)) return false;
  return true;
}

// The gradients as the step reads them.
inline std::vector<float> stored_grad(const optimizer_case& c, int step) {
  std::vector<float> g = c.grads[static_cast<size_t>(step)];
  for (float& x : g)
    x *= c.grad_scale;
  return g;
}

// ---------------------------------------------------------------- reference

// torch.nn.utils.clip_grad_norm_: the gradients are multiplied by
// min(1, clip / (norm + 1e-6)), norm the global L2 norm of the true gradients.
inline double reference_clip_coef(const optimizer_case& c, int step) {
  if (c.clip <= 0) return 1;
  double sum_sq = 0;
  for (float g : c.grads[static_cast<size_t>(step)])
    sum_sq += static_cast<double>(g) * g;
  return std::min(1.0, c.clip / (std::sqrt(sum_sq) + 1e-6));
}

// What the optimizer holds after a step: params, AdamW's m (exp_avg) and v
// (exp_avg_sq), or SGD's momentum buffer in m (0 while it has none).
struct optimizer_state {
  std::vector<double> params, m, v;
};

// torch.optim.AdamW, one element at applied step t (1-based): decoupled
// decay first, then the moments, their bias corrections and the update.
inline void reference_adamw(const optimizer_case& c, double lr, double g, bool decay, int64_t t,
                            double& p, double& m, double& v) {
  if (decay) p -= lr * c.weight_decay * p;
  m = c.beta1 * m + (1 - c.beta1) * g;
  v = c.beta2 * v + (1 - c.beta2) * g * g;
  const double m_hat = m / (1 - std::pow(c.beta1, static_cast<double>(t)));
  const double v_hat = v / (1 - std::pow(c.beta2, static_cast<double>(t)));
  p -= lr * m_hat / (std::sqrt(v_hat) + c.eps);
}

// torch.optim.SGD (dampening 0, no Nesterov), one element at applied step t:
// L2 decay added to the gradient, the buffer starts as the first gradient.
inline void reference_sgd(const optimizer_case& c, double lr, double g, bool decay, int64_t t,
                          double& p, double& buf) {
  double d = decay ? g + c.weight_decay * p : g;
  if (c.momentum > 0) {
    buf = t == 1 ? d : c.momentum * buf + d;
    d = buf;
  }
  p -= lr * d;
}

// The state after each step of the case (skipped steps leave it unchanged).
inline std::vector<optimizer_state> reference_run(const optimizer_case& c) {
  const size_t n = c.params.size();
  optimizer_state s{std::vector<double>(c.params.begin(), c.params.end()),
                    std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  std::vector<optimizer_state> after;
  int64_t t = 0;
  for (int step = 0; step < steps(c); ++step) {
    if (step_applies(c, step)) {
      ++t;
      const double coef = reference_clip_coef(c, step), lr = c.lrs[static_cast<size_t>(step)];
      for (size_t i = 0; i < n; ++i) {
        const double g = c.grads[static_cast<size_t>(step)][i] * coef;
        const bool decay = decays(c, static_cast<int64_t>(i));
        if (c.kind == optimizer_kind::adamw)
          reference_adamw(c, lr, g, decay, t, s.params[i], s.m[i], s.v[i]);
        else
          reference_sgd(c, lr, g, decay, t, s.params[i], s.m[i]);
      }
    }
    after.push_back(s);
  }
  return after;
}

// ---------------------------------------------------------------- cases

inline constexpr float kInf = std::numeric_limits<float>::infinity();

inline std::vector<optimizer_case> optimizer_cases() {
  std::vector<optimizer_case> cases;
  // Decay in two ranges only (elements 2-4 and 6), at three learning rates;
  // one gradient is 0 (the element moves by its decay alone, or not at all).
  optimizer_case a;
  a.name = "AdamwDecayOnlyInRanges";
  a.weight_decay = 0.1;
  a.lrs = {1e-2, 5e-3, 2e-2};
  a.params = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f, 1.0f};
  a.grads = {{0.1f, -0.2f, 0.3f, 0.0f, -0.5f, 0.05f, 0.4f, -0.3f},
             {0.2f, -0.1f, -0.3f, 0.1f, -0.4f, 0.0f, 0.6f, 0.2f},
             {-0.1f, 0.3f, 0.2f, -0.2f, 0.1f, 0.15f, -0.5f, 0.1f}};
  a.decay_ranges = {2, 5, 6, 7};
  cases.push_back(a);

  // fp16-like: gradients stored 2^17 times the true ones (scale 2^16 x
  // post-divide 2); global norms 1.22 (clipped), 0.44 (not), an overflow
  // (skipped: step 3 is the optimizer's third), 2.05 (clipped).
  optimizer_case b;
  b.name = "AdamwClipLossScaleAndSkip";
  b.weight_decay = 0.1;
  b.clip = 1.0;
  b.grad_scale = 131072.0f;
  b.lrs = {1e-2, 1e-2, 1e-2, 8e-3};
  b.params = {1.0f, -0.5f, 0.75f, -1.25f, 0.3f, 2.0f};
  b.grads = {{0.8f, -0.6f, 0.5f, 0.0f, -0.4f, 0.3f},
             {0.1f, 0.2f, -0.1f, 0.3f, 0.05f, -0.2f},
             {0.1f, kInf, 0.2f, 0.0f, 0.1f, 0.1f},
             {1.5f, -0.5f, 0.2f, 0.7f, -1.0f, 0.4f}};
  b.decay_ranges = {0, 3};
  cases.push_back(b);

  // A constant gradient: the bias corrections make m_hat = g and v_hat = g^2
  // at every step t, so with eps negligible (lr * eps / |g| ~ 1e-10) each step
  // moves an element by exactly lr * sign(g), after its decay:
  //   element 0 (g = 0.5, no decay): 1 - 3 * 0.01 = 0.97
  //   element 1 (g = -2, decays): 2 * 0.999 + 0.01 = 2.008;
  //     2.008 * 0.999 + 0.01 = 2.015992; 2.015992 * 0.999 + 0.01 = 2.023976008
  //   element 2 (g = 0, no decay): m = v = 0, so it stays at -1.
  optimizer_case h;
  h.name = "AdamwConstantGradientByHand";
  h.weight_decay = 0.1;
  h.lrs = {1e-2, 1e-2, 1e-2};
  h.params = {1.0f, 2.0f, -1.0f};
  h.grads = {{0.5f, -2.0f, 0.0f}, {0.5f, -2.0f, 0.0f}, {0.5f, -2.0f, 0.0f}};
  h.decay_ranges = {1, 2};
  h.hand_final = {0.97, 2.023976008, -1.0};
  cases.push_back(h);

  // Momentum and coupled (L2) decay in two ranges, at three learning rates.
  optimizer_case s;
  s.name = "SgdMomentumDecayOnlyInRanges";
  s.kind = optimizer_kind::sgd;
  s.momentum = 0.9;
  s.weight_decay = 0.1;
  s.lrs = {0.1, 0.05, 0.1};
  s.params = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f};
  s.grads = {{0.1f, -0.2f, 0.3f, 0.0f, -0.5f, 0.05f, 0.4f},
             {0.2f, -0.1f, -0.3f, 0.1f, -0.4f, 0.0f, 0.6f},
             {-0.1f, 0.3f, 0.2f, -0.2f, 0.1f, 0.15f, -0.5f}};
  s.decay_ranges = {0, 2, 4, 6};
  cases.push_back(s);

  // The first step overflows, so the first applied step (the second) starts
  // the momentum buffer; norms then 0.81 (clipped to 0.5) and 0.23 (not).
  optimizer_case k;
  k.name = "SgdClipLossScaleAndSkippedFirstStep";
  k.kind = optimizer_kind::sgd;
  k.momentum = 0.9;
  k.weight_decay = 0.01;
  k.clip = 0.5;
  k.grad_scale = 256.0f;
  k.lrs = {0.1, 0.1, 0.05};
  k.params = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f};
  k.grads = {{0.1f, -kInf, 0.3f, 0.0f, -0.5f},
             {0.4f, -0.3f, 0.6f, 0.1f, -0.2f},
             {-0.1f, 0.1f, 0.15f, -0.05f, 0.1f}};
  k.decay_ranges = {1, 4};
  cases.push_back(k);

  // p = 1, g = 0.5, lr = 0.1, momentum 0.9, decay 0.1 on element 1 only:
  //   element 0: buf = 0.5, p = 0.95; buf = 0.9 * 0.5 + 0.5 = 0.95, p = 0.855
  //   element 1: d = 0.5 + 0.1 * 1 = 0.6 = buf, p = 0.94;
  //     d = 0.5 + 0.1 * 0.94 = 0.594, buf = 0.9 * 0.6 + 0.594 = 1.134, p = 0.8266
  optimizer_case m;
  m.name = "SgdMomentumByHand";
  m.kind = optimizer_kind::sgd;
  m.momentum = 0.9;
  m.weight_decay = 0.1;
  m.lrs = {0.1, 0.1};
  m.params = {1.0f, 1.0f};
  m.grads = {{0.5f, 0.5f}, {0.5f, 0.5f}};
  m.decay_ranges = {1, 2};
  m.hand_final = {0.855, 0.8266};
  cases.push_back(m);

  // Plain SGD (no momentum buffer) clipped: the norm of (0.3, -0.4, 1.2) is
  // 1.3, so p = -0.1 * g / 1.3: -0.0230769231, 0.0307692308, -0.0923076923
  // (the 1e-6 of the clip factor changes these by < 1e-7).
  optimizer_case c;
  c.name = "SgdClipByHand";
  c.kind = optimizer_kind::sgd;
  c.clip = 1.0;
  c.grad_scale = 1024.0f;
  c.lrs = {0.1};
  c.params = {0.0f, 0.0f, 0.0f};
  c.grads = {{0.3f, -0.4f, 1.2f}};
  c.hand_final = {-0.0230769231, 0.0307692308, -0.0923076923};
  cases.push_back(c);
  return cases;
}

// gtest prints a case (in failures and test lists) by its name.
inline void PrintTo(const optimizer_case& c, std::ostream* os) {
  *os << c.name;
}

// gtest names: the case's name.
struct CaseName {
  std::string operator()(const testing::TestParamInfo<optimizer_case>& info) const {
    return info.param.name;
  }
};

// ---------------------------------------------------------------- program

// A program of one unit whose shard is the case's elements (fp32 params, no
// master copy, fp32 gradients), with the case's optimizer; the step context's
// decay ranges point into it.
class case_program {
 public:
  explicit case_program(const optimizer_case& c) : ranges_(c.decay_ranges.data()) {
    unit_.name = "unit";
    unit_.param_elems = unit_.padded_elems = unit_.shard_elems = elems(c);
    unit_.param_shard = unit_.master = unit_.optimizer_state = unit_.grad_shard = -1;
    unit_.grad_shard_dtype = dtype_id::fp32;
    p_.parallel.world = p_.parallel.shard_group = 1;
    p_.parallel.precision.param = p_.parallel.precision.reduce = p_.parallel.precision.master =
        dtype_id::fp32;
    p_.train.optimizer.kind = c.kind;
    p_.train.optimizer.beta1 = c.beta1;
    p_.train.optimizer.beta2 = c.beta2;
    p_.train.optimizer.eps = c.eps;
    p_.train.optimizer.weight_decay = c.weight_decay;
    p_.train.optimizer.momentum = c.momentum;
    p_.train.clip = c.clip;
    p_.train.steps = steps(c);
    p_.units = &unit_;
    p_.unit_count = 1;
    range_count_ = static_cast<int>(c.decay_ranges.size() / 2);
  }
  case_program(const case_program&) = delete;
  case_program& operator=(const case_program&) = delete;

  const program& get() const { return p_; }
  const int64_t* const* decay_ranges() const { return &ranges_; }
  const int* decay_range_counts() const { return &range_count_; }

 private:
  program p_{};
  program_unit unit_{};
  const int64_t* ranges_;
  int range_count_;
};

// ---------------------------------------------------------------- checks

// The runtime computes in fp32, the reference in double. Values are at most
// ~2.1 in magnitude (half an fp32 ulp there is 1.2e-7) and each step rounds
// about ten fp32 operations per element (powf, sqrtf and FMA contraction on
// the GPU add an ulp or two), so four steps stay within ~1e-6 (measured on
// the CPU: at most 9.2e-8 x (1 + |value|)): 2e-6 absolute plus 2e-6 relative. The smallest effect
// of the bugs these tests target is ~1e-4 (a decay of lr * wd * |p| = 5e-3 * 0.1 * 0.25), 50x the
// tolerance.
inline constexpr double kAtol = 2e-6, kRtol = 2e-6;

inline void expect_near_all(const std::string& what, const std::vector<float>& got,
                            const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], kAtol + kRtol * std::fabs(want[i])) << what << "[" << i << "]";
}

// The runtime's params and state after `step` against the reference's.
inline void expect_step_matches(const optimizer_case& c, int step, const std::vector<float>& params,
                                const std::vector<float>& state, const optimizer_state& want) {
  const std::string at = c.name + " after step " + std::to_string(step + 1) + ": ";
  expect_near_all(at + "params", params, want.params);
  const auto n = static_cast<std::ptrdiff_t>(params.size());
  const std::vector<float> m(state.begin(), state.begin() + n);
  expect_near_all(at + (c.kind == optimizer_kind::adamw ? "m" : "momentum buffer"), m, want.m);
  if (c.kind == optimizer_kind::adamw)
    expect_near_all(at + "v", std::vector<float>(state.begin() + n, state.end()), want.v);
}

// The final params against the values worked out by hand, where the case has them.
inline void expect_hand_values(const optimizer_case& c, const std::vector<float>& params) {
  if (!c.hand_final.empty()) expect_near_all(c.name + " by hand", params, c.hand_final);
}

}  // namespace optim
