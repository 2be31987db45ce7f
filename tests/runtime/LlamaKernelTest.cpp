// LlamaKernelTest: the llama family's kernels (RMSNorm, SwiGLU,
// grouped-query flash attention, plain, in a sliding window, scaled and soft-capped; rotary
// positions in RopeTest)
// against double-precision references written independently of runtime/ (LlamaCases.h; GQA as naive
// softmax attention with k and v repeated per query head), backward passes against central finite
// differences of the reference loss sum(out * R), for fp32, bf16 and fp16 storage, and all of them
// at sizes above the kernels' OpenMP threshold. Tolerances are Reference.h's (forward_tol,
// backward_tol) unless a test says otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/llama.h"
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

// The grouped-query kernels on shape a with options o (window 0: none; scale
// and softcap 0: the defaults): the forward against the naive reference,
// masked as transformers masks a sliding window; the backward (dq, dk, dv)
// against finite differences of it. Outputs start as garbage: every value
// must be written.
template <typename T>
void expect_gqa_matches_reference(const gqa_shape& a, const attention_options& o, unsigned seed) {
  const int64_t N = a.B * a.T, C = a.H * a.hs, KVW = a.KV * a.hs, window = o.window;
  const std::string shape =
      gqa_tag(a) + (window > 0 ? " window " + std::to_string(window) : std::string()) +
      (o.scale > 0 ? " scale " + std::to_string(o.scale) : std::string()) +
      (o.softcap > 0 ? " softcap " + std::to_string(o.softcap) : std::string());
  auto reference = [&](const vec& qq, const vec& kk, const vec& vv) {
    return gqa(qq, kk, vv, a.B, a.T, a.H, a.KV, a.hs, window, o.scale, o.softcap);
  };
  std::mt19937 rng(seed);
  const vec q = quantize<T>(random_vec(rng, N * C, 1.5));
  const vec k = quantize<T>(random_vec(rng, N * KVW, 1.5));
  const vec v = quantize<T>(random_vec(rng, N * KVW));
  const vec R = quantize<T>(random_vec(rng, N * C));
  auto qs = store<T>(q), ks = store<T>(k), vs = store<T>(v), dout = store<T>(R);
  std::vector<T> out(N * C, from_float<T>(7.0f));
  std::vector<float> lse(a.B * a.H * a.T, 7.0f), delta(lse.size(), 7.0f);
  attention_gqa_forward(out.data(), lse.data(), qs.data(), ks.data(), vs.data(), a.B, a.T, a.H,
                        a.KV, a.hs, o);
  expect_close(tag<T>("attention_gqa_forward", "out") + shape, load(out), reference(q, k, v),
               forward_tol<T>());
  auto dq = store<T>(random_vec(rng, N * C, 5.0));
  auto dk = store<T>(random_vec(rng, N * KVW, 5.0)), dv = store<T>(random_vec(rng, N * KVW, 5.0));
  attention_gqa_backward(dq.data(), dk.data(), dv.data(), delta.data(), dout.data(), qs.data(),
                         ks.data(), vs.data(), out.data(), lse.data(), a.B, a.T, a.H, a.KV, a.hs,
                         o);
  auto loss = [&](const vec& qq, const vec& kk, const vec& vv) {
    return ref::dot(reference(qq, kk, vv), R);
  };
  expect_close(tag<T>("attention_gqa_backward", "dq") + shape, load(dq),
               ref::fd_grad(q, [&](const vec& x) { return loss(x, k, v); }), backward_tol<T>());
  expect_close(tag<T>("attention_gqa_backward", "dk") + shape, load(dk),
               ref::fd_grad(k, [&](const vec& x) { return loss(q, x, v); }), backward_tol<T>());
  expect_close(tag<T>("attention_gqa_backward", "dv") + shape, load(dv),
               ref::fd_grad(v, [&](const vec& x) { return loss(q, k, x); }), backward_tol<T>());
}

TYPED_TEST(LlamaKernel, GroupedQueryAttention) {
  for (const gqa_shape& a : kGqaShapes)
    expect_gqa_matches_reference<TypeParam>(a, {}, 5);
}

// Mistral's sliding window: query t attends keys u with t - u < W. Windows of
// 1 (each query itself), 3 and 5, shorter than T.
TYPED_TEST(LlamaKernel, GroupedQueryAttentionInASlidingWindow) {
  const std::pair<gqa_shape, int64_t> cases[] = {
      {{2, 13, 4, 1, 8}, 5}, {{1, 9, 4, 2, 16}, 1}, {{2, 7, 2, 2, 8}, 3}};
  for (const auto& [a, window] : cases)
    expect_gqa_matches_reference<TypeParam>(a, {window}, 7);
}

// Gemma 2's options: scores scaled by query_pre_attn_scalar^-0.5 rather than
// hs^-0.5 and soft-capped, X tanh(s / X), before the window's mask. Caps of
// 0.5 to 2 bend the scores (up to about 3 here) well into tanh's curve;
// scales above and below 1 / sqrt(hs); with and without a window, GQA and
// multi-head.
TYPED_TEST(LlamaKernel, GroupedQueryAttentionScaledAndSoftCapped) {
  const std::pair<gqa_shape, attention_options> cases[] = {
      {{2, 13, 4, 1, 8}, {0, 0.0f, 1.0f}},
      {{1, 9, 4, 2, 16}, {0, 1.0f / std::sqrt(24.0f), 0.5f}},
      {{2, 7, 2, 2, 8}, {3, 0.6f, 2.0f}},
      {{2, 13, 4, 1, 8}, {5, 0.2f, 0.0f}}};
  for (const auto& [a, o] : cases)
    expect_gqa_matches_reference<TypeParam>(a, o, 9);
}

// A window of at least T is plain causal attention, bit for bit.
TEST(GroupedQueryAttention, AWindowOfTheContextIsPlainCausal) {
  const int64_t B = 2, T_ = 9, H = 4, KV = 2, hs = 8, N = B * T_;
  std::mt19937 rng(8);
  const std::vector<float> q = store<float>(random_vec(rng, N * H * hs));
  const std::vector<float> k = store<float>(random_vec(rng, N * KV * hs));
  const std::vector<float> v = store<float>(random_vec(rng, N * KV * hs));
  const std::vector<float> dout = store<float>(random_vec(rng, N * H * hs));
  auto run = [&](int64_t window, std::vector<float>* out, std::vector<float>* grads) {
    std::vector<float> lse(B * H * T_), delta(lse.size()), dq(q.size()), dk(k.size()), dv(v.size());
    out->assign(q.size(), 0.0f);
    attention_gqa_forward(out->data(), lse.data(), q.data(), k.data(), v.data(), B, T_, H, KV, hs,
                          window);
    attention_gqa_backward(dq.data(), dk.data(), dv.data(), delta.data(), dout.data(), q.data(),
                           k.data(), v.data(), out->data(), lse.data(), B, T_, H, KV, hs, window);
    *grads = dq;
    grads->insert(grads->end(), dk.begin(), dk.end());
    grads->insert(grads->end(), dv.begin(), dv.end());
  };
  std::vector<float> out0, grads0;
  run(0, &out0, &grads0);
  for (const int64_t window : {T_, T_ + 1, int64_t{4096}}) {
    std::vector<float> out, grads;
    run(window, &out, &grads);
    EXPECT_EQ(out, out0) << "window " << window;
    EXPECT_EQ(grads, grads0) << "window " << window;
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

TEST(GroupedQueryAttention, RejectsANegativeOrNonFiniteScaleOrSoftcap) {
  std::vector<float> buf(2 * 2 * 8), lse(4);
  for (const attention_options& o :
       {attention_options{0, -1.0f, 0.0f}, attention_options{0, 0.0f, -50.0f},
        attention_options{0, 0.0f, INFINITY}, attention_options{0, NAN, 0.0f}})
    EXPECT_THROW(attention_gqa_forward(buf.data(), lse.data(), buf.data(), buf.data(), buf.data(),
                                       1, 2, 2, 2, 8, o),
                 std::invalid_argument)
        << "scale " << o.scale << " softcap " << o.softcap;
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
}  // namespace llama_cases
