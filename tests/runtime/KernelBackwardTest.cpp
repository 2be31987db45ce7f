// KernelBackwardTest: the backward of every kernel of runtime/cpu/kernels.h
// against central finite differences of the double-precision reference loss
// sum(out * R) with dout = R (Reference.h), for fp32, bf16 and fp16 storage
// and gradients; and every kernel, forward and backward, bit-identical on 1
// and 4 threads.
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "tests/runtime/KernelCases.h"
#include "tests/runtime/Reference.h"

using ref::load;
using ref::quantize;
using ref::random_vec;
using ref::store;
using ref::vec;

namespace {

using kernel_cases::attention_tag;
using kernel_cases::default_workspace;
using kernel_cases::flash_tag;
using kernel_cases::kAttentionShapes;
using kernel_cases::kFlashShapes;
using kernel_cases::StorageGradTypes;
using kernel_cases::StorageTypes;
using ref::backward_tol;
using ref::expect_close;
using ref::forward_tol;
using ref::tag;

template <class T>
class KernelBackward : public ::testing::Test {};
TYPED_TEST_SUITE(KernelBackward, StorageTypes, ref::StorageTypeNames);
template <class P>
class KernelParamBackward : public ::testing::Test {};
TYPED_TEST_SUITE(KernelParamBackward, StorageGradTypes, ref::StorageGradNames);

TYPED_TEST(KernelParamBackward, Encoder) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t B = 2, T_ = 8, C = 80, V = 10;  // 16 tokens of 10: ids repeat
  std::mt19937 rng(21);
  const auto tokens = ref::random_tokens(rng, B * T_, V);
  const vec wte = random_vec(rng, V * C), wpe = random_vec(rng, T_ * C);
  const vec R = quantize<T>(random_vec(rng, B * T_ * C));
  const vec gwte = ref::fd_grad(
      wte, [&](const vec& v) { return ref::dot(ref::encoder(tokens, v, wpe, B, T_, C), R); });
  const vec gwpe = ref::fd_grad(
      wpe, [&](const vec& v) { return ref::dot(ref::encoder(tokens, wte, v, B, T_, C), R); });
  const vec prior_wte = quantize<G>(random_vec(rng, V * C)),
            prior_wpe = quantize<G>(random_vec(rng, T_ * C));
  auto dwte = store<G>(prior_wte), dwpe = store<G>(prior_wpe);
  auto dout = store<T>(R);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_, C);
  expect_close(tag<T, G>("encoder_backward", "dwte"), load(dwte), ref::add(prior_wte, gwte),
               backward_tol<T, G>());
  expect_close(tag<T, G>("encoder_backward", "dwpe"), load(dwpe), ref::add(prior_wpe, gwpe),
               backward_tol<T, G>());
}

TYPED_TEST(KernelParamBackward, Layernorm) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t N = 6, C = 80;
  std::mt19937 rng(22);
  const vec x = quantize<T>(random_vec(rng, N * C, 2.0, 0.5));
  const vec w = quantize<T>(random_vec(rng, C, 0.3, 1.0)), b = quantize<T>(random_vec(rng, C, 0.2));
  const vec R = quantize<T>(random_vec(rng, N * C));
  auto loss = [&](const vec& xx, const vec& ww, const vec& bb) {
    return ref::dot(ref::layernorm(xx, ww, bb, N, C), R);
  };
  const vec gx = ref::fd_grad(x, [&](const vec& v) { return loss(v, w, b); });
  const vec gw = ref::fd_grad(w, [&](const vec& v) { return loss(x, v, b); });
  const vec gb = ref::fd_grad(b, [&](const vec& v) { return loss(x, w, v); });
  auto xs = store<T>(x), ws = store<T>(w), bs = store<T>(b), dout = store<T>(R);
  std::vector<T> out(N * C);
  std::vector<float> mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), xs.data(), ws.data(), bs.data(), N, C);
  for (bool accumulate : {false, true}) {
    // Without accumulate, dinp's old contents (garbage here) must not matter.
    const vec prior_x = quantize<T>(random_vec(rng, N * C, 5.0));
    const vec prior_w = quantize<G>(random_vec(rng, C)), prior_b = quantize<G>(random_vec(rng, C));
    auto dinp = store<T>(prior_x);
    auto dw = store<G>(prior_w), db = store<G>(prior_b);
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), xs.data(), ws.data(),
                       mean.data(), rstd.data(), N, C, accumulate);
    const char* what = accumulate ? "dinp (accumulate)" : "dinp";
    expect_close(tag<T, G>("layernorm_backward", what), load(dinp),
                 accumulate ? ref::add(prior_x, gx) : gx, backward_tol<T>());
    expect_close(tag<T, G>("layernorm_backward", "dweight"), load(dw), ref::add(prior_w, gw),
                 backward_tol<T, G>());
    expect_close(tag<T, G>("layernorm_backward", "dbias"), load(db), ref::add(prior_b, gb),
                 backward_tol<T, G>());
  }
}

TYPED_TEST(KernelParamBackward, Matmul) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t N = 12, IC = 24, OC = 40;
  std::mt19937 rng(23);
  const vec x = quantize<T>(random_vec(rng, N * IC)), w = quantize<T>(random_vec(rng, IC * OC));
  const vec bias = quantize<T>(random_vec(rng, OC)), R = quantize<T>(random_vec(rng, N * OC));
  auto loss = [&](const vec& xx, const vec& ww, const vec& bb) {
    return ref::dot(ref::matmul(xx, ww, bb, N, IC, OC), R);
  };
  const vec gx = ref::fd_grad(x, [&](const vec& v) { return loss(v, w, bias); });
  const vec gw = ref::fd_grad(w, [&](const vec& v) { return loss(x, v, bias); });
  const vec gb = ref::fd_grad(bias, [&](const vec& v) { return loss(x, w, v); });
  auto xs = store<T>(x), ws = store<T>(w), dout = store<T>(R);
  const vec prior_w = quantize<G>(random_vec(rng, IC * OC)),
            prior_b = quantize<G>(random_vec(rng, OC));
  auto dinp = store<T>(random_vec(rng, N * IC, 5.0));
  auto dw = store<G>(prior_w), db = store<G>(prior_b);
  matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), xs.data(), ws.data(), N, IC, OC,
                  default_workspace());
  expect_close(tag<T, G>("matmul_backward", "dinp"), load(dinp), gx, backward_tol<T>());
  expect_close(tag<T, G>("matmul_backward", "dweight"), load(dw), ref::add(prior_w, gw),
               backward_tol<T, G>());
  expect_close(tag<T, G>("matmul_backward", "dbias"), load(db), ref::add(prior_b, gb),
               backward_tol<T, G>());
  // Without dinp and dbias only dweight changes (+= again).
  matmul_backward(static_cast<T*>(nullptr), dw.data(), static_cast<G*>(nullptr), dout.data(),
                  xs.data(), ws.data(), N, IC, OC, default_workspace());
  expect_close(tag<T, G>("matmul_backward", "dweight (twice)"), load(dw),
               ref::add(ref::add(prior_w, gw), gw), backward_tol<T, G>());
}

TYPED_TEST(KernelParamBackward, LmHead) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t N = 12, C = 16, V = 50;
  std::mt19937 rng(24);
  const vec x = quantize<T>(random_vec(rng, N * C)), w = quantize<T>(random_vec(rng, V * C));
  const vec R = quantize<T>(random_vec(rng, N * V));
  const vec gx =
      ref::fd_grad(x, [&](const vec& v) { return ref::dot(ref::lm_head(v, w, N, C, V), R); });
  const vec gw =
      ref::fd_grad(w, [&](const vec& v) { return ref::dot(ref::lm_head(x, v, N, C, V), R); });
  auto xs = store<T>(x), ws = store<T>(w), dlogits = store<T>(R);
  const vec prior_w = quantize<G>(random_vec(rng, V * C));
  auto dx = store<T>(random_vec(rng, N * C, 5.0));
  auto dw = store<G>(prior_w);
  lm_head_backward(dx.data(), dw.data(), dlogits.data(), xs.data(), ws.data(), N, C, V,
                   default_workspace());
  expect_close(tag<T, G>("lm_head_backward", "dx"), load(dx), gx, backward_tol<T>());
  expect_close(tag<T, G>("lm_head_backward", "dw"), load(dw), ref::add(prior_w, gw),
               backward_tol<T, G>());
}

TYPED_TEST(KernelBackward, Attention) {
  using T = TypeParam;
  for (const auto& a : kAttentionShapes) {
    const int64_t B = a.B, T_ = a.T, C = a.C, H = a.H;
    std::mt19937 rng(25);
    const vec qkv = quantize<T>(random_vec(rng, B * T_ * 3 * C, 1.5));
    const vec R = quantize<T>(random_vec(rng, B * T_ * C));
    const vec gqkv = ref::fd_grad(
        qkv, [&](const vec& v) { return ref::dot(ref::attention(v, B, T_, C, H), R); });
    auto qkv_s = store<T>(qkv), dout = store<T>(R);
    // dprobs and dqkv start as garbage: every value read must have been written.
    std::vector<T> out(B * T_ * C), probs(B * H * T_ * T_),
        dprobs(B * H * T_ * T_, from_float<T>(7.0f));
    attention_forward(out.data(), probs.data(), qkv_s.data(), B, T_, C, H, default_workspace());
    auto dqkv = store<T>(random_vec(rng, B * T_ * 3 * C, 5.0));
    attention_backward(dqkv.data(), dprobs.data(), dout.data(), qkv_s.data(), probs.data(), B, T_,
                       C, H, default_workspace());
    expect_close(tag<T>("attention_backward", "dqkv") + attention_tag(a), load(dqkv), gqkv,
                 backward_tol<T>());
  }
}

// Flash backward from the flash forward's out and lse: dqkv against central
// differences of the reference (the backward tolerance), delta against
// dout . out in double, and dqkv against the materialized backward (fp32:
// summation order, 1e-4; bf16: the materialized kernel also rounds P, dP and
// dS to bf16, 2e-2 as against the reference). dqkv and delta start as
// garbage: every value must be written.
TYPED_TEST(KernelBackward, AttentionFlash) {
  using T = TypeParam;
  for (const auto& a : kFlashShapes) {
    const int64_t B = a.B, T_ = a.T, C = a.C, H = a.H, hs = C / H;
    std::mt19937 rng(29);
    const vec qkv = quantize<T>(random_vec(rng, B * T_ * 3 * C, 1.5));
    const vec R = quantize<T>(random_vec(rng, B * T_ * C));
    auto qkv_s = store<T>(qkv), dout = store<T>(R);
    std::vector<T> out(B * T_ * C), probs(B * H * T_ * T_), dprobs(probs.size()),
        mat_dqkv(B * T_ * 3 * C);
    std::vector<float> lse(B * H * T_), delta(B * H * T_, 7.0f);
    attention_forward_flash(out.data(), lse.data(), qkv_s.data(), B, T_, C, H);
    auto dqkv = store<T>(random_vec(rng, B * T_ * 3 * C, 5.0));
    attention_backward_flash(dqkv.data(), delta.data(), dout.data(), qkv_s.data(), out.data(),
                             lse.data(), B, T_, C, H);
    vec want_delta(B * H * T_, 0.0);
    for (int64_t r = 0; r < B * H * T_; r++) {
      const int64_t bh = r / T_, t = r % T_;
      const int64_t at = ((bh / H) * T_ + t) * C + (bh % H) * hs;
      for (int64_t c = 0; c < hs; c++)
        want_delta[r] += R[at + c] * to_float(out[at + c]);
    }
    expect_close(tag<T>("attention_backward_flash", "delta") + flash_tag(a), load(delta),
                 want_delta, forward_tol<float>());
    if (a.T * a.C <= 70 * 16) {  // finite differences of the small shapes only (they are O(n^2))
      const vec gqkv = ref::fd_grad(
          qkv, [&](const vec& v) { return ref::dot(ref::attention(v, B, T_, C, H), R); });
      expect_close(tag<T>("attention_backward_flash", "dqkv") + flash_tag(a), load(dqkv), gqkv,
                   backward_tol<T>());
    }
    attention_forward(out.data(), probs.data(), qkv_s.data(), B, T_, C, H, default_workspace());
    attention_backward(mat_dqkv.data(), dprobs.data(), dout.data(), qkv_s.data(), probs.data(), B,
                       T_, C, H, default_workspace());
    expect_close(tag<T>("attention_backward_flash", "dqkv vs materialized") + flash_tag(a),
                 load(dqkv), load(mat_dqkv), backward_tol<T>());
  }
}

TYPED_TEST(KernelBackward, Gelu) {
  using T = TypeParam;
  const int64_t n = 200;
  std::mt19937 rng(26);
  const vec x = quantize<T>(random_vec(rng, n, 4.0)), R = quantize<T>(random_vec(rng, n));
  const vec gx = ref::fd_grad(x, [&](const vec& v) { return ref::dot(ref::gelu(v), R); });
  auto xs = store<T>(x), dout = store<T>(R);
  std::vector<T> dinp(n);
  gelu_backward(dinp.data(), xs.data(), dout.data(), n);
  expect_close(tag<T>("gelu_backward", "dinp"), load(dinp), gx, backward_tol<T>());
  gelu_backward(dout.data(), xs.data(), dout.data(), n);  // in place
  expect_close(tag<T>("gelu_backward", "dinp (in place)"), load(dout), gx, backward_tol<T>());
}

TYPED_TEST(KernelBackward, CrossEntropy) {
  using T = TypeParam;
  const int64_t N = 16, V = 50;
  const float dloss_scale = 0.37f;
  std::mt19937 rng(27);
  const vec logits = quantize<T>(random_vec(rng, N * V, 3.0));
  const auto targets = ref::random_tokens(rng, N, V);
  const vec g = ref::fd_grad(logits, [&](const vec& v) {
    double s = 0.0;
    for (double l : ref::cross_entropy(v, targets, N, V))
      s += dloss_scale * l;
    return s;
  });
  auto ls = store<T>(logits);
  std::vector<float> losses(N);
  cross_entropy_fused(ls.data(), losses.data(), targets.data(), N, V, V, dloss_scale);
  expect_close(tag<T>("cross_entropy_fused", "dlogits"), load(ls), g, backward_tol<T>());
}

// With Gemma 2's final_logit_softcapping X: the gradient of the raw logits,
// through X tanh(l / X), against finite differences of the capped losses.
TYPED_TEST(KernelBackward, CrossEntropySoftCapped) {
  using T = TypeParam;
  const int64_t N = 16, V = 50;
  const float dloss_scale = 0.37f;
  for (const float X : {2.0f, 5.0f}) {
    std::mt19937 rng(28);
    const vec logits = quantize<T>(random_vec(rng, N * V, 3.0));
    const auto targets = ref::random_tokens(rng, N, V);
    const vec g = ref::fd_grad(logits, [&](const vec& v) {
      double s = 0.0;
      for (double l : ref::cross_entropy(ref::softcap(v, X), targets, N, V))
        s += dloss_scale * l;
      return s;
    });
    auto ls = store<T>(logits);
    std::vector<float> losses(N);
    cross_entropy_fused(ls.data(), losses.data(), targets.data(), N, V, V, dloss_scale, X);
    expect_close(tag<T>("cross_entropy_fused", "dlogits softcap ") + std::to_string(X), load(ls), g,
                 backward_tol<T>());
  }
}

// Rows of a padded vocabulary (V = 50 of Vp = 128 columns): the padded
// columns hold values that would dominate the max and the sum if they took
// part; the losses and the true columns' gradient are bit for bit those of
// the unpadded rows (the same loops over the same V values: exact, no
// tolerance) and the padded columns end zero.
// The same with a softcap (3): the padded columns are not capped into the rows either.
TYPED_TEST(KernelBackward, CrossEntropyPaddedColumnsTakeNoPart) {
  using T = TypeParam;
  const int64_t N = 16, V = 50, Vp = 128;
  for (const float softcap : {0.0f, 3.0f}) {
    std::mt19937 rng(31);
    const std::vector<T> unpadded = store<T>(random_vec(rng, N * V, 3.0));
    const auto targets = ref::random_tokens(rng, N, V);
    std::vector<T> padded(static_cast<size_t>(N * Vp), from_float<T>(40.0f));
    for (int64_t n = 0; n < N; ++n)
      std::copy_n(unpadded.begin() + n * V, V, padded.begin() + n * Vp);
    std::vector<T> want = unpadded;
    std::vector<float> want_losses(N), losses(N);
    cross_entropy_fused(want.data(), want_losses.data(), targets.data(), N, V, V, 0.37f, softcap);
    cross_entropy_fused(padded.data(), losses.data(), targets.data(), N, V, Vp, 0.37f, softcap);
    EXPECT_EQ(losses, want_losses) << "softcap " << softcap;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < Vp; ++v) {
        const float got = to_float(padded[static_cast<size_t>(n * Vp + v)]);
        const float expected = v < V ? to_float(want[static_cast<size_t>(n * V + v)]) : 0.0f;
        ASSERT_EQ(got, expected) << "row " << n << " column " << v << " of " << V << " (Vp " << Vp
                                 << "), softcap " << softcap;
      }
  }
}

// Every kernel gives bit-identical results on 1 and 4 OpenMP threads, on
// shapes large enough to take the parallel paths: no races, and sums whose
// order does not depend on the thread count (attention's GEMMs run on
// OpenBLAS's threads, which this leaves alone).
TYPED_TEST(KernelParamBackward, ThreadCountInvariant) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t B = 4, T_ = 32, C = 128, H = 4, V = 20, N = B * T_;
  std::mt19937 rng(28);
  const auto tokens = ref::random_tokens(rng, N, V);
  const auto x = store<T>(random_vec(rng, N * C)), qkv = store<T>(random_vec(rng, N * 3 * C));
  const auto wte = store<T>(random_vec(rng, V * C)), wpe = store<T>(random_vec(rng, T_ * C));
  const auto w = store<T>(random_vec(rng, C, 0.2, 1.0)), b = store<T>(random_vec(rng, C));
  const auto dout = store<T>(random_vec(rng, N * C)),
             logits = store<T>(random_vec(rng, N * V, 3.0));
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<vec> r;
    std::vector<T> out(N * C), attn(N * C), probs(B * H * T_ * T_), dprobs(probs.size()),
        dqkv(N * 3 * C), dx(N * C), ce = logits;
    std::vector<G> dwte(V * C), dwpe(T_ * C), dw(C), db(C);
    std::vector<float> mean(N), rstd(N), losses(N);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T_, C);
    r.push_back(load(out));
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_, C);
    r.push_back(load(dwte));
    r.push_back(load(dwpe));
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    r.push_back(load(out));
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C, false);
    r.push_back(load(dx));
    r.push_back(load(dw));
    r.push_back(load(db));
    attention_forward(attn.data(), probs.data(), qkv.data(), B, T_, C, H, default_workspace());
    r.push_back(load(attn));
    attention_backward(dqkv.data(), dprobs.data(), dout.data(), qkv.data(), probs.data(), B, T_, C,
                       H, default_workspace());
    r.push_back(load(dqkv));
    std::vector<float> lse(B * H * T_), delta(B * H * T_);
    attention_forward_flash(attn.data(), lse.data(), qkv.data(), B, T_, C, H);
    r.push_back(load(attn));
    r.push_back(load(lse));
    attention_backward_flash(dqkv.data(), delta.data(), dout.data(), qkv.data(), attn.data(),
                             lse.data(), B, T_, C, H);
    r.push_back(load(dqkv));
    r.push_back(load(delta));
    gelu_forward(out.data(), x.data(), N * C);
    r.push_back(load(out));
    gelu_backward(out.data(), x.data(), dout.data(), N * C);
    r.push_back(load(out));
    residual_forward(out.data(), x.data(), dout.data(), N * C);
    r.push_back(load(out));
    cross_entropy_fused(ce.data(), losses.data(), tokens.data(), N, V, V, 0.5f);
    r.push_back(load(ce));
    r.push_back(load(losses));
    return r;
  };
  const int saved = omp_get_max_threads();
  const auto one = run(1), four = run(4);
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), four.size());
  for (size_t i = 0; i < one.size(); i++)
    EXPECT_EQ(one[i], four[i]) << "result " << i;
}

}  // namespace
