// LlamaKernelTest: the llama family's kernels (RMSNorm, SwiGLU, rotary
// positions, grouped-query flash attention) against double-precision
// references written here independently of runtime/ (RoPE as complex
// multiplication, GQA as naive softmax attention with k and v repeated per
// query head), backward passes against central finite differences of the
// reference loss sum(out * R), for fp32, bf16 and fp16 storage. Tolerances are
// Reference.h's (forward_tol, backward_tol) unless a test says otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/kernels.h"
#include "runtime/llama.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"
#include "tests/runtime/Reference.h"

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

// ---------------------------------------------------------------- references

// y = x / sqrt(mean(x^2) + eps) * w, per row.
vec rmsnorm(const vec& x, const vec& w, int64_t N, int64_t C, double eps) {
  vec y(x.size());
  for (int64_t n = 0; n < N; n++) {
    double ss = 0;
    for (int64_t c = 0; c < C; c++)
      ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; c++)
      y[n * C + c] = x[n * C + c] * r * w[c];
  }
  return y;
}

vec swiglu(const vec& gate, const vec& up) {
  vec y(gate.size());
  for (size_t i = 0; i < gate.size(); i++)
    y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

// Each head's pair (x[i], x[i + D/2]) as the complex number x[i] + j x[i + D/2],
// times e^{j turn t f_i} with f_i = theta^(-2i/D) (no scaling); turn -1 is
// the inverse rotation.
vec rope(const vec& x, int64_t N, int64_t T, int64_t heads, int64_t D, double theta,
         double turn = 1.0) {
  vec y(x.size());
  const int64_t half = D / 2;
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < half; i++) {
        const int64_t at = (n * heads + h) * D;
        const double angle = turn * static_cast<double>(n % T) * std::pow(theta, -2.0 * i / D);
        const std::complex<double> z =
            std::complex<double>(x[at + i], x[at + i + half]) * std::polar(1.0, angle);
        y[at + i] = z.real();
        y[at + i + half] = z.imag();
      }
  return y;
}

// Causal softmax attention with k and v repeated for each query head: head h
// reads kv head h / (H / KV). q, out (N, H*hs); k, v (N, KV*hs).
vec gqa(const vec& q, const vec& k, const vec& v, int64_t B, int64_t T, int64_t H, int64_t KV,
        int64_t hs) {
  vec out(q.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / (H / KV);
      for (int64_t t = 0; t < T; t++) {
        std::vector<double> s(t + 1);
        double m = -1e300;
        for (int64_t u = 0; u <= t; u++) {
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += q[((b * T + t) * H + h) * hs + c] * k[((b * T + u) * KV + g) * hs + c];
          s[u] = d * scale;
          m = std::max(m, s[u]);
        }
        double sum = 0;
        for (double& e : s)
          sum += (e = std::exp(e - m));
        for (int64_t u = 0; u <= t; u++)
          for (int64_t c = 0; c < hs; c++)
            out[((b * T + t) * H + h) * hs + c] += s[u] / sum * v[((b * T + u) * KV + g) * hs + c];
      }
    }
  return out;
}

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

// Gradients of sum(rmsnorm(x, w) * R): with r = (mean(x^2) + eps)^(-1/2) per
// row, dx_j = r w_j R_j - r^3 x_j / C sum_c R_c w_c x_c and dw_c = sum over
// rows of R_c x_c r.
void rmsnorm_grads(const vec& x, const vec& w, const vec& R, int64_t N, int64_t C, double eps,
                   vec* dx, vec* dw) {
  dx->assign(x.size(), 0.0);
  dw->assign(C, 0.0);
  for (int64_t n = 0; n < N; n++) {
    const double* xr = &x[n * C];
    const double* Rr = &R[n * C];
    double ss = 0, rwx = 0;
    for (int64_t c = 0; c < C; c++) {
      ss += xr[c] * xr[c];
      rwx += Rr[c] * w[c] * xr[c];
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; c++) {
      (*dx)[n * C + c] = r * w[c] * Rr[c] - r * r * r * xr[c] * rwx / static_cast<double>(C);
      (*dw)[c] += Rr[c] * xr[c] * r;
    }
  }
}

// Gradients of sum(gqa(q, k, v) * R), per query head h on kv head g = h /
// (H / KV), as for multi-head attention on k and v repeated: P the causal
// softmax of scale q k^T, dP = R v^T, dS = P (dP - rowsum(P dP)), dq = scale
// dS k, and the group's dk = scale dS^T q and dv = P^T R summed into kv head g.
void gqa_grads(const vec& q, const vec& k, const vec& v, const vec& R, int64_t B, int64_t T,
               int64_t H, int64_t KV, int64_t hs, vec* dq, vec* dk, vec* dv) {
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto qa = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h) * hs; };
  auto ka = [&](int64_t b, int64_t u, int64_t g) { return ((b * T + u) * KV + g) * hs; };
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / (H / KV);
      for (int64_t t = 0; t < T; t++) {
        vec p(t + 1), dp(t + 1);
        double m = -1e300, sum = 0, pdp = 0;
        for (int64_t u = 0; u <= t; u++) {
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += q[qa(b, t, h) + c] * k[ka(b, u, g) + c];
          p[u] = scale * d;
          m = std::max(m, p[u]);
        }
        for (double& e : p)
          sum += (e = std::exp(e - m));
        for (int64_t u = 0; u <= t; u++) {
          p[u] /= sum;
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += R[qa(b, t, h) + c] * v[ka(b, u, g) + c];
          dp[u] = d;
          pdp += p[u] * d;
        }
        for (int64_t u = 0; u <= t; u++) {
          const double ds = p[u] * (dp[u] - pdp);
          for (int64_t c = 0; c < hs; c++) {
            (*dq)[qa(b, t, h) + c] += scale * ds * k[ka(b, u, g) + c];
            (*dk)[ka(b, u, g) + c] += scale * ds * q[qa(b, t, h) + c];
            (*dv)[ka(b, u, g) + c] += p[u] * R[qa(b, t, h) + c];
          }
        }
      }
    }
}

// ---------------------------------------------------------------- suites

using StorageTypes = ::testing::Types<float, bf16, fp16>;
template <class T>
class LlamaKernel : public ::testing::Test {};
TYPED_TEST_SUITE(LlamaKernel, StorageTypes, ref::StorageTypeNames);
template <class P>
class LlamaParamBackward : public ::testing::Test {};
using StorageGradTypes =
    ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<bf16, float>,
                     ref::storage_grad<bf16, bf16>, ref::storage_grad<fp16, float>>;
TYPED_TEST_SUITE(LlamaParamBackward, StorageGradTypes, ref::StorageGradNames);

// ---------------------------------------------------------------- RMSNorm

// eps = 0.5 (far above mean(x^2) for the scaled-down rows) shows that eps is
// the caller's and is used; 1e-5 is llama's.
TYPED_TEST(LlamaKernel, RmsnormForward) {
  using T = TypeParam;
  const int64_t N = 7, C = 40;
  for (const double eps : {1e-5, 0.5}) {
    std::mt19937 rng(1);
    const vec x = quantize<T>(random_vec(rng, N * C, 0.3));
    const vec w = quantize<T>(random_vec(rng, C, 0.2, 1.0));
    auto xs = store<T>(x), ws = store<T>(w);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), xs.data(), ws.data(), N, C, static_cast<float>(eps));
    const std::string what = "out eps " + std::to_string(eps);
    expect_close(tag<T>("rmsnorm_forward", what.c_str()), load(out), rmsnorm(x, w, N, C, eps),
                 forward_tol<T>());
    vec want_rstd(N);
    for (int64_t n = 0; n < N; n++) {
      double ss = 0;
      for (int64_t c = 0; c < C; c++)
        ss += x[n * C + c] * x[n * C + c];
      want_rstd[n] = 1.0 / std::sqrt(ss / C + eps);
    }
    expect_close(tag<T>("rmsnorm_forward", "rstd"), load(rstd), want_rstd, forward_tol<float>());
  }
}

// dinp overwritten and accumulated, dweight accumulated onto prior values.
TYPED_TEST(LlamaParamBackward, Rmsnorm) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t N = 5, C = 24;
  const double eps = 1e-5;
  for (const bool accumulate : {false, true}) {
    std::mt19937 rng(2);
    const vec x = quantize<T>(random_vec(rng, N * C));
    const vec w = quantize<T>(random_vec(rng, C, 0.3, 1.0));
    const vec R = quantize<T>(random_vec(rng, N * C));
    const vec prior_dinp = quantize<T>(random_vec(rng, N * C));
    const vec prior_dw = quantize<G>(random_vec(rng, C));
    auto xs = store<T>(x), ws = store<T>(w), dout = store<T>(R), dinp = store<T>(prior_dinp);
    auto dw = store<G>(prior_dw);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), xs.data(), ws.data(), N, C, static_cast<float>(eps));
    rmsnorm_backward(dinp.data(), dw.data(), dout.data(), xs.data(), ws.data(), rstd.data(), N, C,
                     accumulate);
    const vec gx =
        ref::fd_grad(x, [&](const vec& v) { return ref::dot(rmsnorm(v, w, N, C, eps), R); });
    const vec gw =
        ref::fd_grad(w, [&](const vec& v) { return ref::dot(rmsnorm(x, v, N, C, eps), R); });
    expect_close(tag<T, G>("rmsnorm_backward", accumulate ? "dinp +=" : "dinp"), load(dinp),
                 accumulate ? ref::add(prior_dinp, gx) : gx, backward_tol<T, G>());
    expect_close(tag<T, G>("rmsnorm_backward", "dweight +="), load(dw), ref::add(prior_dw, gw),
                 backward_tol<T, G>());
  }
}

// ---------------------------------------------------------------- SwiGLU

// Gates from -30 to 30: silu saturates at both ends without overflow.
TYPED_TEST(LlamaKernel, Swiglu) {
  using T = TypeParam;
  const int64_t n = 300;
  std::mt19937 rng(3);
  vec g = random_vec(rng, n, 3.0);
  g[0] = -30;
  g[1] = 30;
  g = quantize<T>(g);
  const vec u = quantize<T>(random_vec(rng, n));
  const vec R = quantize<T>(random_vec(rng, n));
  auto gs = store<T>(g), us = store<T>(u), dout = store<T>(R);
  std::vector<T> out(n), dgate(n), dup(n);
  swiglu_forward(out.data(), gs.data(), us.data(), n);
  expect_close(tag<T>("swiglu_forward", "out"), load(out), swiglu(g, u), forward_tol<T>());
  swiglu_backward(dgate.data(), dup.data(), dout.data(), gs.data(), us.data(), n);
  expect_close(tag<T>("swiglu_backward", "dgate"), load(dgate),
               ref::fd_grad(g, [&](const vec& v) { return ref::dot(swiglu(v, u), R); }),
               backward_tol<T>());
  expect_close(tag<T>("swiglu_backward", "dup"), load(dup),
               ref::fd_grad(u, [&](const vec& v) { return ref::dot(swiglu(g, v), R); }),
               backward_tol<T>());
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
  std::vector<float> x(2 * 6), cos(3), sin(3);
  expect_error([&] { rope_forward(x.data(), cos.data(), sin.data(), 2, 1, 2, 3); }, "head size 3");
  expect_error([&] { rope_backward(x.data(), cos.data(), sin.data(), 2, 0, 2, 6); }, "context 0");
}

// ---------------------------------------------------------------- grouped-query attention

struct gqa_shape {
  int64_t B, T, H, KV, hs;
};
// T not a power of two; groups of 4, 2 and 1 (multi-head) query heads per kv head.
constexpr gqa_shape kGqaShapes[] = {{2, 13, 4, 1, 8}, {1, 9, 4, 2, 16}, {2, 7, 2, 2, 8}};

std::string gqa_tag(const gqa_shape& a) {
  return " (T=" + std::to_string(a.T) + " H=" + std::to_string(a.H) +
         " KV=" + std::to_string(a.KV) + " hs=" + std::to_string(a.hs) + ")";
}

// Forward against the naive reference; backward (dq, dk, dv) against finite
// differences of it. Outputs start as garbage: every value must be written.
TYPED_TEST(LlamaKernel, GroupedQueryAttention) {
  using T = TypeParam;
  for (const gqa_shape& a : kGqaShapes) {
    const int64_t N = a.B * a.T, C = a.H * a.hs, KVW = a.KV * a.hs;
    std::mt19937 rng(5);
    const vec q = quantize<T>(random_vec(rng, N * C, 1.5));
    const vec k = quantize<T>(random_vec(rng, N * KVW, 1.5));
    const vec v = quantize<T>(random_vec(rng, N * KVW));
    const vec R = quantize<T>(random_vec(rng, N * C));
    auto qs = store<T>(q), ks = store<T>(k), vs = store<T>(v), dout = store<T>(R);
    std::vector<T> out(N * C, from_float<T>(7.0f));
    std::vector<float> lse(a.B * a.H * a.T, 7.0f), delta(lse.size(), 7.0f);
    attention_gqa_forward(out.data(), lse.data(), qs.data(), ks.data(), vs.data(), a.B, a.T, a.H,
                          a.KV, a.hs);
    expect_close(tag<T>("attention_gqa_forward", "out") + gqa_tag(a), load(out),
                 gqa(q, k, v, a.B, a.T, a.H, a.KV, a.hs), forward_tol<T>());
    auto dq = store<T>(random_vec(rng, N * C, 5.0));
    auto dk = store<T>(random_vec(rng, N * KVW, 5.0)), dv = store<T>(random_vec(rng, N * KVW, 5.0));
    attention_gqa_backward(dq.data(), dk.data(), dv.data(), delta.data(), dout.data(), qs.data(),
                           ks.data(), vs.data(), out.data(), lse.data(), a.B, a.T, a.H, a.KV, a.hs);
    auto loss = [&](const vec& qq, const vec& kk, const vec& vv) {
      return ref::dot(gqa(qq, kk, vv, a.B, a.T, a.H, a.KV, a.hs), R);
    };
    expect_close(tag<T>("attention_gqa_backward", "dq") + gqa_tag(a), load(dq),
                 ref::fd_grad(q, [&](const vec& x) { return loss(x, k, v); }), backward_tol<T>());
    expect_close(tag<T>("attention_gqa_backward", "dk") + gqa_tag(a), load(dk),
                 ref::fd_grad(k, [&](const vec& x) { return loss(q, x, v); }), backward_tol<T>());
    expect_close(tag<T>("attention_gqa_backward", "dv") + gqa_tag(a), load(dv),
                 ref::fd_grad(v, [&](const vec& x) { return loss(q, k, x); }), backward_tol<T>());
  }
}

// With as many kv heads as query heads, grouped-query attention on q, k and
// v arrays is gpt2's packed-qkv flash attention, bit for bit.
TEST(GroupedQueryAttention, WithEveryHeadIsPackedFlashAttention) {
  const int64_t B = 2, T_ = 9, H = 3, hs = 8, C = H * hs, N = B * T_;
  std::mt19937 rng(6);
  const std::vector<float> qkv = store<float>(random_vec(rng, N * 3 * C));
  const std::vector<float> dout = store<float>(random_vec(rng, N * C));
  std::vector<float> q(N * C), k(N * C), v(N * C);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      q[n * C + c] = qkv[n * 3 * C + c];
      k[n * C + c] = qkv[n * 3 * C + C + c];
      v[n * C + c] = qkv[n * 3 * C + 2 * C + c];
    }
  std::vector<float> out(N * C), lse(B * H * T_), delta(lse.size()), dqkv(N * 3 * C);
  std::vector<float> gout(N * C), glse(lse.size()), gdelta(lse.size()), dq(N * C), dk(N * C),
      dv(N * C);
  attention_forward_flash(out.data(), lse.data(), qkv.data(), B, T_, C, H);
  attention_backward_flash(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(),
                           lse.data(), B, T_, C, H);
  attention_gqa_forward(gout.data(), glse.data(), q.data(), k.data(), v.data(), B, T_, H, H, hs);
  attention_gqa_backward(dq.data(), dk.data(), dv.data(), gdelta.data(), dout.data(), q.data(),
                         k.data(), v.data(), gout.data(), glse.data(), B, T_, H, H, hs);
  EXPECT_EQ(out, gout);
  EXPECT_EQ(lse, glse);
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      ASSERT_EQ(dqkv[n * 3 * C + c], dq[n * C + c]) << n << "," << c;
      ASSERT_EQ(dqkv[n * 3 * C + C + c], dk[n * C + c]) << n << "," << c;
      ASSERT_EQ(dqkv[n * 3 * C + 2 * C + c], dv[n * C + c]) << n << "," << c;
    }
}

TEST(GroupedQueryAttention, RejectsKvHeadsThatDoNotDivideHeads) {
  std::vector<float> buf(4 * 3 * 8), lse(6);
  EXPECT_THROW(attention_gqa_forward(buf.data(), lse.data(), buf.data(), buf.data(), buf.data(), 1,
                                     2, 3, 2, 8),
               std::invalid_argument);
}

// ---------------------------------------------------------------- multithreaded sizes

// Above the kernels' threshold for OpenMP (2^14 elements; the tests above
// run serially), against the analytic double gradients (checked against
// finite differences at the small sizes above through the same kernels):
// rmsnorm (N 201, C 96, one all-zero row: out 0, rstd 1 / sqrt(eps)),
// swiglu (20100 values), rope (3 x 67 rows, 8 heads of 64; backward is the
// inverse rotation) and GQA (B 2, T 67, 8 query heads on 2 kv heads of 32).
// Tolerances as above; GQA's fp32 backward sums 67 terms of products of
// unit-scale values, within 1e-4.
TYPED_TEST(LlamaKernel, MultithreadedSizes) {
  using T = TypeParam;
  std::mt19937 rng(8);
  {
    const int64_t N = 201, C = 96;
    const double eps = 1e-5;
    vec x = random_vec(rng, N * C);
    std::fill(x.begin(), x.begin() + C, 0.0);
    x = quantize<T>(x);
    const vec w = quantize<T>(random_vec(rng, C, 0.3, 1.0)),
              R = quantize<T>(random_vec(rng, N * C));
    auto xs = store<T>(x), ws = store<T>(w), dout = store<T>(R);
    std::vector<T> out(N * C), dinp(N * C);
    std::vector<float> rstd(N), dw(C, 0.0f);
    rmsnorm_forward(out.data(), rstd.data(), xs.data(), ws.data(), N, C, static_cast<float>(eps));
    rmsnorm_backward(dinp.data(), dw.data(), dout.data(), xs.data(), ws.data(), rstd.data(), N, C,
                     false);
    vec gx, gw;
    rmsnorm_grads(x, w, R, N, C, eps, &gx, &gw);
    expect_close(tag<T>("rmsnorm_forward", "out (large)"), load(out), rmsnorm(x, w, N, C, eps),
                 forward_tol<T>());
    EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(eps), 1e-6 / std::sqrt(eps)) << "all-zero row";
    expect_close(tag<T>("rmsnorm_backward", "dinp (large)"), load(dinp), gx, backward_tol<T>());
    expect_close(tag<T>("rmsnorm_backward", "dweight (large)"), load(dw), gw,
                 backward_tol<T, float>());
  }
  {
    const int64_t n = 20100;
    const vec g = quantize<T>(random_vec(rng, n, 4.0)), u = quantize<T>(random_vec(rng, n));
    const vec R = quantize<T>(random_vec(rng, n));
    auto gs = store<T>(g), us = store<T>(u), dout = store<T>(R);
    std::vector<T> out(n), dgate(n), dup(n);
    swiglu_forward(out.data(), gs.data(), us.data(), n);
    swiglu_backward(dgate.data(), dup.data(), dout.data(), gs.data(), us.data(), n);
    vec want_dgate(n), want_dup(n);
    for (int64_t i = 0; i < n; i++) {
      const double sig = 1.0 / (1.0 + std::exp(-g[i]));
      want_dup[i] = R[i] * g[i] * sig;
      want_dgate[i] = R[i] * u[i] * sig * (1.0 + g[i] * (1.0 - sig));
    }
    expect_close(tag<T>("swiglu_forward", "out (large)"), load(out), swiglu(g, u),
                 forward_tol<T>());
    expect_close(tag<T>("swiglu_backward", "dgate (large)"), load(dgate), want_dgate,
                 backward_tol<T>());
    expect_close(tag<T>("swiglu_backward", "dup (large)"), load(dup), want_dup, backward_tol<T>());
  }
  {
    const int64_t T_ = 67, N = 3 * T_, heads = 8, D = 64;
    std::vector<float> cos(T_ * D / 2), sin(T_ * D / 2);
    rope_tables(cos.data(), sin.data(), T_, D, 10000.0, {});
    const vec x = quantize<T>(random_vec(rng, N * heads * D));
    auto fwd = store<T>(x), bwd = store<T>(x);
    rope_forward(fwd.data(), cos.data(), sin.data(), N, T_, heads, D);
    rope_backward(bwd.data(), cos.data(), sin.data(), N, T_, heads, D);
    expect_close(tag<T>("rope_forward", "x (large)"), load(fwd), rope(x, N, T_, heads, D, 10000.0),
                 forward_tol<T>());
    expect_close(tag<T>("rope_backward", "dx (large)"), load(bwd),
                 rope(x, N, T_, heads, D, 10000.0, -1.0), forward_tol<T>());
  }
  {
    const gqa_shape a{2, 67, 8, 2, 32};
    const int64_t N = a.B * a.T, C = a.H * a.hs, KVW = a.KV * a.hs;
    const vec q = quantize<T>(random_vec(rng, N * C, 1.5));
    const vec k = quantize<T>(random_vec(rng, N * KVW, 1.5));
    const vec v = quantize<T>(random_vec(rng, N * KVW)), R = quantize<T>(random_vec(rng, N * C));
    auto qs = store<T>(q), ks = store<T>(k), vs = store<T>(v), dout = store<T>(R);
    std::vector<T> out(N * C), dq(N * C), dk(N * KVW), dv(N * KVW);
    std::vector<float> lse(a.B * a.H * a.T), delta(lse.size());
    attention_gqa_forward(out.data(), lse.data(), qs.data(), ks.data(), vs.data(), a.B, a.T, a.H,
                          a.KV, a.hs);
    attention_gqa_backward(dq.data(), dk.data(), dv.data(), delta.data(), dout.data(), qs.data(),
                           ks.data(), vs.data(), out.data(), lse.data(), a.B, a.T, a.H, a.KV, a.hs);
    vec gq, gk, gv;
    gqa_grads(q, k, v, R, a.B, a.T, a.H, a.KV, a.hs, &gq, &gk, &gv);
    expect_close(tag<T>("attention_gqa_forward", "out") + gqa_tag(a), load(out),
                 gqa(q, k, v, a.B, a.T, a.H, a.KV, a.hs), forward_tol<T>());
    expect_close(tag<T>("attention_gqa_backward", "dq") + gqa_tag(a), load(dq), gq,
                 backward_tol<T>());
    expect_close(tag<T>("attention_gqa_backward", "dk") + gqa_tag(a), load(dk), gk,
                 backward_tol<T>());
    expect_close(tag<T>("attention_gqa_backward", "dv") + gqa_tag(a), load(dv), gv,
                 backward_tol<T>());
  }
}

}  // namespace

// ---------------------------------------------------------------- sub-block units

namespace {

namespace model = fsdpgen::model;

// The tensors of pieces [first, end) of a llama block (the others null).
template <class Out>
Out only_llama_pieces(Out all, int first, int end) {
  Out p = all;
  auto keep = [&](auto& field, int piece) {
    if (piece < first || piece >= end) field = nullptr;
  };
  keep(p.rms1_w, kLlamaRms1), keep(p.q_w, kLlamaQ), keep(p.k_w, kLlamaK), keep(p.v_w, kLlamaV);
  keep(p.o_w, kLlamaO), keep(p.rms2_w, kLlamaRms2), keep(p.gate_w, kLlamaGate);
  keep(p.up_w, kLlamaUp), keep(p.down_w, kLlamaDown);
  return p;
}

struct llama_block_result {
  std::vector<float> out, dinput, grads;
};

// One fp32 llama block (grouped-query attention, rotary positions) forward
// from x and backward from dout, a call per range of `pieces`, each given
// only its pieces' tensors.
llama_block_result run_llama_block(const std::vector<float>& params, const std::vector<float>& x,
                                   const std::vector<float>& dout, const llama_dims& d,
                                   const std::vector<block_pieces>& pieces) {
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  std::vector<std::byte> saved(model::slot_bytes(model::kLlamaBlockSaved, md, d.N(), 4));
  std::vector<std::byte> scratch(model::slot_bytes(model::kLlamaBackwardScratch, md, d.N(), 4));
  std::vector<float> cos(d.T * d.D() / 2), sin(cos.size()), grads(params.size(), 0.0f);
  rope_tables(cos.data(), sin.data(), d.T, d.D(), 10000.0, rope_scaling{});
  const llama_rope rope{cos.data(), sin.data()};
  static std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace ws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  const auto s = llama_block_saved_at<float>(saved.data(), d);
  const auto sc = llama_backward_scratch_at<float>(scratch.data(), d);
  std::copy(x.begin(), x.end(), s.input);
  const auto p = llama_block_params_at<float>(params.data(), d);
  const auto g = llama_block_grads_at<float>(grads.data(), d);
  std::vector<float> out(d.N() * d.C);
  for (const block_pieces& r : pieces)
    llama_block_forward(out.data(), only_llama_pieces(p, r.first, r.end), s, rope, d, ws, r);
  std::copy(dout.begin(), dout.end(), sc.dres);
  for (auto r = pieces.rbegin(); r != pieces.rend(); ++r)
    llama_block_backward(only_llama_pieces(g, r->first, r->end),
                         only_llama_pieces(p, r->first, r->end), s, sc, rope, d, ws, *r);
  return {out, std::vector<float>(sc.dres, sc.dres + d.N() * d.C), grads};
}

}  // namespace

// A llama block run piece by piece (each linear its own range, a norm with
// the linear after it; and every piece alone) equals the whole block bit for
// bit; and it is a block (d(input) is not zero, every gradient is touched).
TEST(LlamaBlock, PieceByPieceEqualsTheWholeBlock) {
  llama_dims d;
  d.B = 2, d.T = 8, d.C = 32, d.H = 4, d.KV_heads = 2, d.F = 48, d.V = 50;
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  const int64_t n =
      model::offset_elems(model::kLlamaBlockParams, std::size(model::kLlamaBlockParams), md);
  std::mt19937 rng(43);
  std::vector<float> params(n);
  for (float& v : params)
    v = std::uniform_real_distribution<float>(-0.2f, 0.2f)(rng);
  const auto xd = random_vec(rng, d.N() * d.C), doutd = random_vec(rng, d.N() * d.C);
  const std::vector<float> x(xd.begin(), xd.end()), dout(doutd.begin(), doutd.end());
  const auto whole = run_llama_block(params, x, dout, d, {{}});
  const std::vector<block_pieces> each_linear = {{0, 2}, {2, 3}, {3, 4}, {4, 5},
                                                 {5, 7}, {7, 8}, {8, 9}};
  std::vector<block_pieces> each_piece;
  for (int i = 0; i < kLlamaPieces; ++i)
    each_piece.push_back({i, i + 1});
  for (const auto& split : {each_linear, each_piece}) {
    const auto parts = run_llama_block(params, x, dout, d, split);
    EXPECT_EQ(parts.out, whole.out) << split.size() << " ranges";
    EXPECT_EQ(parts.dinput, whole.dinput) << split.size() << " ranges";
    EXPECT_EQ(parts.grads, whole.grads) << split.size() << " ranges";
  }
  EXPECT_GT(std::count_if(whole.grads.begin(), whole.grads.end(), [](float v) { return v != 0; }),
            n / 2);
}
