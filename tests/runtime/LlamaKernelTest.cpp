// LlamaKernelTest: the llama family's kernels (RMSNorm, SwiGLU, rotary
// positions, grouped-query flash attention) against double-precision
// references written here independently of runtime/ (RoPE as complex
// multiplication, GQA as naive softmax attention with k and v repeated per
// query head), backward passes against central finite differences of the
// reference loss sum(out * R), for fp32, bf16 and fp16 storage. Tolerances are
// Reference.h's (forward_tol, backward_tol) unless a test says otherwise.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include "runtime/kernels.h"
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
// times e^{j t f_i} with f_i = theta^(-2i/D) (no scaling).
vec rope(const vec& x, int64_t N, int64_t T, int64_t heads, int64_t D, double theta) {
  vec y(x.size());
  const int64_t half = D / 2;
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < half; i++) {
        const int64_t at = (n * heads + h) * D;
        const double angle = static_cast<double>(n % T) * std::pow(theta, -2.0 * i / D);
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

}  // namespace
