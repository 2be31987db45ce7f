// RopeTest: rotary positions (runtime/rope.h): the inverse frequencies
// with and without llama3 or linear scaling, their cos and sin tables, and the
// rotation forward and backward against complex multiplication
// (LlamaCases.h's rope) and finite differences, for fp32, bf16 and fp16
// storage. Tolerances are Reference.h's (forward_tol, backward_tol) unless a
// test says otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/rope.h"
#include "tests/runtime/LlamaCases.h"
#include "tests/runtime/Reference.h"

namespace llama_cases {
namespace {

using ref::backward_tol;
using ref::expect_close;
using ref::forward_tol;
using ref::load;
using ref::quantize;
using ref::random_vec;
using ref::store;
using ref::tag;
using ref::vec;

// transformers' llama3 rule restated by frequency rather than wavelength
// (wavelength 2 pi / f beyond context / low_freq is f < 2 pi low_freq /
// context): such f divided by factor, f above 2 pi high_freq / context kept,
// f between scaled by smooth + (1 - smooth) / factor, smooth = (context f /
// (2 pi) - low_freq) / (high_freq - low_freq). regime[i]: 0 divided, 1
// between, 2 kept.
vec llama3_inv_freq(int64_t D, double theta, const rope_scaling& s, std::vector<int>* regime) {
  const double two_pi = 2.0 * std::acos(-1.0), context = static_cast<double>(s.original_context);
  vec f(D / 2);
  regime->assign(D / 2, 0);
  for (int64_t i = 0; i < D / 2; i++) {
    const double plain = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
    if (plain < two_pi * s.low_freq / context) {
      f[i] = plain / s.factor;
    } else if (plain > two_pi * s.high_freq / context) {
      f[i] = plain;
      (*regime)[i] = 2;
    } else {
      const double smooth = (context * plain / two_pi - s.low_freq) / (s.high_freq - s.low_freq);
      f[i] = plain * (smooth + (1.0 - smooth) / s.factor);
      (*regime)[i] = 1;
    }
  }
  return f;
}

// ---------------------------------------------------------------- rotary positions

// Llama 3.1's scaling (factor 32, low_freq 1, high_freq 4, original context
// 8192, theta 500000, head size 128) in each of its three regimes, worked out
// by hand from transformers' rope_type "llama3" (wavelength 2 pi / f; low
// frequencies' wavelengths beyond 8192 / 1, high ones' below 8192 / 4 = 2048):
//   i = 0:  f = 1, wavelength 6.28 < 2048: kept, 1.
//   i = 28: f = 500000^(-56/128) = 3.21145e-3, wavelength 1956.5 < 2048: kept.
//   i = 32: f = 500000^(-1/2) = 1.41421e-3, wavelength 4442.88, between:
//           smooth = (8192 / 4442.88 - 1) / (4 - 1) = 0.281282, and
//           f ((1 - smooth) / 32 + smooth) = 4.29557e-4.
//   i = 35: f = 7.64497e-4, wavelength 8218.7 > 8192: f / 32 = 2.38905e-5.
//   i = 63: f = 2.45514e-6, wavelength 2.56e6: f / 32 = 7.67231e-8.
// Without scaling every f is theta^(-2i/D). fp32 throughout: relative 1e-6.
TEST(Rope, InverseFrequenciesFollowLlama3Scaling) {
  const rope_scaling llama3{32.0, 1.0, 4.0, 8192};
  const std::vector<float> f = rope_inv_freq(128, 500000.0, llama3);
  ASSERT_EQ(f.size(), 64u);
  const std::pair<int, double> want[] = {
      {0, 1.0}, {28, 3.21145e-3}, {32, 4.29557e-4}, {35, 2.38905e-5}, {63, 7.67231e-8}};
  for (const auto& [i, value] : want)
    EXPECT_NEAR(f[i], value, 1e-5 * value) << "frequency " << i;
  const std::vector<float> plain = rope_inv_freq(128, 500000.0, {});
  for (int i = 0; i < 64; i++)
    EXPECT_NEAR(plain[i], std::pow(500000.0, -i / 64.0), 1e-6 * plain[i]) << "frequency " << i;
  EXPECT_EQ(plain[28], f[28]);  // high frequencies untouched
}

// The rotation against complex multiplication, at positions past one
// sequence (rows n of B = 3 sequences of T = 11), 4 heads of 16; backward
// is the transpose (rotation back), against finite differences.
TYPED_TEST(LlamaKernel, Rope) {
  using T = TypeParam;
  const int64_t B = 3, T_ = 11, N = B * T_, heads = 4, D = 16;
  const double theta = 10000.0;
  std::vector<float> cos(T_ * D / 2), sin(T_ * D / 2);
  rope_tables(cos.data(), sin.data(), T_, D, theta, {});
  std::mt19937 rng(4);
  const vec x = quantize<T>(random_vec(rng, N * heads * D));
  const vec R = quantize<T>(random_vec(rng, N * heads * D));
  auto xs = store<T>(x), dx = store<T>(R);
  rope_forward(xs.data(), cos.data(), sin.data(), N, T_, heads, D);
  expect_close(tag<T>("rope_forward", "x"), load(xs), rope(x, N, T_, heads, D, theta),
               forward_tol<T>());
  rope_backward(dx.data(), cos.data(), sin.data(), N, T_, heads, D);
  expect_close(
      tag<T>("rope_backward", "dx"), load(dx),
      ref::fd_grad(x, [&](const vec& v) { return ref::dot(rope(v, N, T_, heads, D, theta), R); }),
      backward_tol<T>());
}

// Every frequency of three scalings against llama3_inv_freq: Llama 3.1 8B's
// (head 128) and Llama 3.2 1B's (head 64; i <= 14 kept, 15..17 between,
// >= 18 divided), and a small one (head 32, theta 10^4, factor 4, low 2,
// high 8, context 64: f_0 = 1 kept, f_1 = 0.562 and f_2 = 0.316 between
// 2 pi 2 / 64 = 0.196 and 2 pi 8 / 64 = 0.785, f_3 = 0.178 on divided); each
// hits all three regimes. Tolerance relative 1e-5: the kernel's fp32
// smooth = (context / wavelength - low_freq) / (high_freq - low_freq) errs by
// ~1e-7 absolute, and (factor - 1) times that is the result's relative error.
TEST(Rope, EveryInverseFrequencyFollowsLlama3Scaling) {
  struct scaled {
    int64_t D;
    double theta;
    rope_scaling scaling;
  };
  const scaled cases[] = {{128, 500000.0, {8.0, 1.0, 4.0, 8192}},
                          {64, 500000.0, {32.0, 1.0, 4.0, 8192}},
                          {32, 10000.0, {4.0, 2.0, 8.0, 64}}};
  for (const scaled& c : cases) {
    std::vector<int> regime;
    const vec want = llama3_inv_freq(c.D, c.theta, c.scaling, &regime);
    for (const int r : {0, 1, 2})
      ASSERT_NE(std::count(regime.begin(), regime.end(), r), 0) << "regime " << r << " D " << c.D;
    const std::vector<float> got = rope_inv_freq(c.D, c.theta, c.scaling);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); i++)
      EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "D " << c.D << " factor " << c.scaling.factor
                                                   << " frequency " << i << " regime " << regime[i];
  }
}

// Linear scaling (transformers' rope_type "linear", Gemma 3 4B's global
// layers: theta 10^6, factor 8, head 256) divides every unscaled frequency
// theta^(-2i/D) by the factor, the first (1) to 0.125 and the last to
// 10^(-6 * 254/256) / 8 = 1.3925e-7; it reads no llama3 field, so leftover
// ones change nothing. fp32 throughout: relative 1e-6.
TEST(Rope, LinearScalingDividesEveryFrequency) {
  const rope_scaling linear{.factor = 8.0, .linear = true};
  const std::vector<float> f = rope_inv_freq(256, 1e6, linear);
  ASSERT_EQ(f.size(), 128u);
  EXPECT_EQ(f[0], 0.125f);
  for (int i = 0; i < 128; i++)
    EXPECT_NEAR(f[i], std::pow(1e6, -i / 128.0) / 8, 1e-6 * f[i]) << "frequency " << i;
  EXPECT_NEAR(f[127], 1.3925e-7, 1e-11);
  const rope_scaling leftovers{8.0, 1.0, 4.0, 8192, true};
  EXPECT_EQ(rope_inv_freq(256, 1e6, leftovers), f);
}

// The tables are cos and sin of t f_i for the (scaled) frequencies f_i of
// rope_inv_freq, over T = 37 positions. The angle is an fp32 product (as
// transformers' fp32 matmul): off by half an ulp of 37 (2e-6) at most, so
// cos and sin are within 4e-6 of the double values; position 0 is exactly
// cos 1, sin 0.
TEST(Rope, TablesAreCosAndSinOfPositionTimesFrequency) {
  const int64_t T = 37, D = 32;
  const rope_scaling scaling{4.0, 2.0, 8.0, 64};
  const std::vector<float> f = rope_inv_freq(D, 10000.0, scaling);
  std::vector<float> cos(T * D / 2), sin(T * D / 2);
  rope_tables(cos.data(), sin.data(), T, D, 10000.0, scaling);
  vec want_cos(cos.size()), want_sin(sin.size());
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < D / 2; i++) {
      want_cos[t * D / 2 + i] = std::cos(static_cast<double>(t) * f[i]);
      want_sin[t * D / 2 + i] = std::sin(static_cast<double>(t) * f[i]);
    }
  expect_close("rope_tables cos", load(cos), want_cos, 4e-6, 0.0);
  expect_close("rope_tables sin", load(sin), want_sin, 4e-6, 0.0);
  for (int64_t i = 0; i < D / 2; i++) {
    EXPECT_EQ(cos[i], 1.0f) << i;
    EXPECT_EQ(sin[i], 0.0f) << i;
  }
}

// Rows at position 0 (n % T == 0) leave forward and backward bit for bit
// unchanged; every other row turns (some value changes).
TYPED_TEST(LlamaKernel, RopeAtPositionZeroIsIdentity) {
  using T = TypeParam;
  const int64_t B = 3, T_ = 5, N = B * T_, heads = 3, D = 8, W = heads * D;
  std::vector<float> cos(T_ * D / 2), sin(T_ * D / 2);
  rope_tables(cos.data(), sin.data(), T_, D, 10000.0, {4.0, 2.0, 8.0, 64});
  std::mt19937 rng(7);
  const std::vector<T> x = store<T>(random_vec(rng, N * W));
  std::vector<T> fwd = x, bwd = x;
  rope_forward(fwd.data(), cos.data(), sin.data(), N, T_, heads, D);
  rope_backward(bwd.data(), cos.data(), sin.data(), N, T_, heads, D);
  for (int64_t n = 0; n < N; n++) {
    int64_t changed = 0;
    for (int64_t c = 0; c < W; c++) {
      const float before = to_float(x[n * W + c]);
      if (n % T_ == 0) {
        ASSERT_EQ(to_float(fwd[n * W + c]), before) << "forward row " << n << " column " << c;
        ASSERT_EQ(to_float(bwd[n * W + c]), before) << "backward row " << n << " column " << c;
      }
      changed += to_float(fwd[n * W + c]) != before;
    }
    if (n % T_ != 0) {
      EXPECT_GT(changed, 0) << "row " << n << " did not turn";
    }
  }
}

// Heads that cannot pair x[i] with x[i + D/2], a non-positive theta or
// context, and llama3 scalings whose wavelength bounds are meaningless are
// refused, naming the value.
TEST(Rope, RejectsBadShapesAndScalings) {
  auto expect_error = [](const std::function<void()>& f, const std::string& want) {
    try {
      f();
      ADD_FAILURE() << "no error; wanted one mentioning '" << want << "'";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  expect_error([] { rope_inv_freq(7, 10000.0, {}); }, "head size 7");
  expect_error([] { rope_inv_freq(0, 10000.0, {}); }, "head size 0");
  expect_error([] { rope_inv_freq(8, 0.0, {}); }, "theta");
  expect_error([] { rope_inv_freq(8, 10000.0, {0.5, 1.0, 4.0, 8192}); }, "factor 0.5");
  expect_error([] { rope_inv_freq(8, 10000.0, {8.0, 4.0, 4.0, 8192}); }, "low_freq 4");
  expect_error([] { rope_inv_freq(8, 10000.0, {8.0, 1.0, 4.0, 0}); }, "original_context 0");
  expect_error([] { rope_inv_freq(8, 10000.0, {.factor = 0.5, .linear = true}); },
               "linear scaling needs factor >= 1; got factor 0.5");
  std::vector<float> x(2 * 6), cos(3), sin(3);
  expect_error([&] { rope_forward(x.data(), cos.data(), sin.data(), 2, 1, 2, 3); }, "head size 3");
  expect_error([&] { rope_backward(x.data(), cos.data(), sin.data(), 2, 0, 2, 6); }, "context 0");
}

}  // namespace
}  // namespace llama_cases
