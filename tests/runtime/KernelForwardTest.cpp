// KernelForwardTest: the forward of every kernel of runtime/cpu/kernels.h against
// the double-precision reference (Reference.h), for fp32, bf16 and fp16
// storage.
#include <stdexcept>
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
using kernel_cases::StorageTypes;
using ref::expect_close;
using ref::forward_tol;
using ref::tag;

template <class T>
class KernelForward : public ::testing::Test {};
TYPED_TEST_SUITE(KernelForward, StorageTypes, ref::StorageTypeNames);

TYPED_TEST(KernelForward, Encoder) {
  using T = TypeParam;
  const int64_t B = 2, T_ = 8, C = 80, V = 10;
  std::mt19937 rng(1);
  const auto tokens = ref::random_tokens(rng, B * T_, V);
  const vec wte = quantize<T>(random_vec(rng, V * C)), wpe = quantize<T>(random_vec(rng, T_ * C));
  auto wte_s = store<T>(wte), wpe_s = store<T>(wpe);
  std::vector<T> out(B * T_ * C);
  encoder_forward(out.data(), tokens.data(), wte_s.data(), wpe_s.data(), B, T_, C);
  expect_close(tag<T>("encoder_forward", "out"), load(out),
               ref::encoder(tokens, wte, wpe, B, T_, C), forward_tol<T>());
}

TYPED_TEST(KernelForward, Layernorm) {
  using T = TypeParam;
  const int64_t N = 6, C = 80;
  std::mt19937 rng(2);
  const vec x = quantize<T>(random_vec(rng, N * C, 2.0, 0.5));
  const vec w = quantize<T>(random_vec(rng, C, 0.3, 1.0)), b = quantize<T>(random_vec(rng, C, 0.2));
  auto xs = store<T>(x), ws = store<T>(w), bs = store<T>(b);
  std::vector<T> out(N * C);
  std::vector<float> mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), xs.data(), ws.data(), bs.data(), N, C);
  vec want_mean, want_rstd;
  const vec want = ref::layernorm(x, w, b, N, C, &want_mean, &want_rstd);
  expect_close(tag<T>("layernorm_forward", "out"), load(out), want, forward_tol<T>());
  // The statistics are fp32 whatever T is.
  expect_close(tag<T>("layernorm_forward", "mean"), load(mean), want_mean, forward_tol<float>());
  expect_close(tag<T>("layernorm_forward", "rstd"), load(rstd), want_rstd, forward_tol<float>());
}

TYPED_TEST(KernelForward, Matmul) {
  using T = TypeParam;
  const int64_t N = 12, IC = 24, OC = 40;
  std::mt19937 rng(3);
  const vec x = quantize<T>(random_vec(rng, N * IC)), w = quantize<T>(random_vec(rng, IC * OC));
  const vec bias = quantize<T>(random_vec(rng, OC));
  auto xs = store<T>(x), ws = store<T>(w), bs = store<T>(bias);
  std::vector<T> out(N * OC);
  matmul_forward(out.data(), xs.data(), ws.data(), bs.data(), N, IC, OC, default_workspace());
  expect_close(tag<T>("matmul_forward", "out"), load(out), ref::matmul(x, w, bias, N, IC, OC),
               forward_tol<T>());
  matmul_forward(out.data(), xs.data(), ws.data(), static_cast<const T*>(nullptr), N, IC, OC,
                 default_workspace());
  expect_close(tag<T>("matmul_forward", "out (no bias)"), load(out),
               ref::matmul(x, w, {}, N, IC, OC), forward_tol<T>());
}

TYPED_TEST(KernelForward, LmHead) {
  using T = TypeParam;
  const int64_t N = 12, C = 16, V = 50;
  std::mt19937 rng(4);
  const vec x = quantize<T>(random_vec(rng, N * C)), w = quantize<T>(random_vec(rng, V * C));
  auto xs = store<T>(x), ws = store<T>(w);
  std::vector<T> logits(N * V);
  lm_head_forward(logits.data(), xs.data(), ws.data(), N, C, V, default_workspace());
  expect_close(tag<T>("lm_head_forward", "logits"), load(logits), ref::lm_head(x, w, N, C, V),
               forward_tol<T>());
}

TYPED_TEST(KernelForward, Attention) {
  using T = TypeParam;
  for (const auto& a : kAttentionShapes) {
    const int64_t B = a.B, T_ = a.T, C = a.C, H = a.H;
    std::mt19937 rng(5);
    const vec qkv = quantize<T>(random_vec(rng, B * T_ * 3 * C, 1.5));
    auto qkv_s = store<T>(qkv);
    std::vector<T> out(B * T_ * C), probs(B * H * T_ * T_, from_float<T>(7.0f));
    attention_forward(out.data(), probs.data(), qkv_s.data(), B, T_, C, H, default_workspace());
    vec want_probs;
    const vec want = ref::attention(qkv, B, T_, C, H, &want_probs);
    expect_close(tag<T>("attention_forward", "out") + attention_tag(a), load(out), want,
                 forward_tol<T>());
    expect_close(tag<T>("attention_forward", "probs") + attention_tag(a), load(probs), want_probs,
                 forward_tol<T>());
    for (int64_t bh = 0; bh < B * H; bh++)
      for (int64_t t = 0; t < T_; t++)
        for (int64_t u = t + 1; u < T_; u++)
          ASSERT_EQ(to_float(probs[(bh * T_ + t) * T_ + u]), 0.0f) << "probs above the diagonal";
  }
}

// Flash against the double reference (out; lse is fp32 whatever T is) and
// against the materialized kernel on the same stored inputs. Flash keeps
// scores and probabilities in fp32 where the materialized kernel stores them
// as T, so in bf16 the two differ by that rounding: the bf16 forward
// tolerance (2e-2); in fp32 by summation order only: 1e-5.
TYPED_TEST(KernelForward, AttentionFlash) {
  using T = TypeParam;
  for (const auto& a : kFlashShapes) {
    const int64_t B = a.B, T_ = a.T, C = a.C, H = a.H;
    std::mt19937 rng(9);
    const vec qkv = quantize<T>(random_vec(rng, B * T_ * 3 * C, 1.5));
    auto qkv_s = store<T>(qkv);
    std::vector<T> out(B * T_ * C, from_float<T>(7.0f)), mat_out(B * T_ * C),
        probs(B * H * T_ * T_);
    std::vector<float> lse(B * H * T_, 7.0f);
    attention_forward_flash(out.data(), lse.data(), qkv_s.data(), B, T_, C, H);
    attention_forward(mat_out.data(), probs.data(), qkv_s.data(), B, T_, C, H, default_workspace());
    vec want_lse;
    const vec want = ref::attention(qkv, B, T_, C, H, nullptr, &want_lse);
    expect_close(tag<T>("attention_forward_flash", "out") + flash_tag(a), load(out), want,
                 forward_tol<T>());
    expect_close(tag<T>("attention_forward_flash", "lse") + flash_tag(a), load(lse), want_lse,
                 forward_tol<float>());
    expect_close(tag<T>("attention_forward_flash", "out vs materialized") + flash_tag(a), load(out),
                 load(mat_out), forward_tol<T>());
  }
}

TEST(KernelForward, AttentionFlashRejectsBadHeads) {
  std::vector<float> buf(3 * 2 * (kAttentionFlashMaxHeadSize + 1)), lse(2);
  // One head of kAttentionFlashMaxHeadSize + 1 channels, and C not a multiple of H.
  EXPECT_THROW(attention_forward_flash(buf.data(), lse.data(), buf.data(), 1, 2,
                                       kAttentionFlashMaxHeadSize + 1, 1),
               std::invalid_argument);
  EXPECT_THROW(attention_backward_flash(buf.data(), lse.data(), buf.data(), buf.data(), buf.data(),
                                        lse.data(), 1, 2, 10, 3),
               std::invalid_argument);
}

TYPED_TEST(KernelForward, Gelu) {
  using T = TypeParam;
  const int64_t n = 200;
  std::mt19937 rng(6);
  const vec x = quantize<T>(random_vec(rng, n, 4.0));
  auto xs = store<T>(x);
  std::vector<T> out(n);
  gelu_forward(out.data(), xs.data(), n);
  expect_close(tag<T>("gelu_forward", "out"), load(out), ref::gelu(x), forward_tol<T>());
}

TYPED_TEST(KernelForward, Residual) {
  using T = TypeParam;
  const int64_t n = 100;
  std::mt19937 rng(7);
  const vec a = quantize<T>(random_vec(rng, n)), b = quantize<T>(random_vec(rng, n));
  auto as = store<T>(a), bs = store<T>(b);
  std::vector<T> out(n);
  residual_forward(out.data(), as.data(), bs.data(), n);
  expect_close(tag<T>("residual_forward", "out"), load(out), ref::add(a, b), forward_tol<T>());
  residual_forward(as.data(), as.data(), bs.data(), n);  // in place
  expect_close(tag<T>("residual_forward", "out (in place)"), load(as), ref::add(a, b),
               forward_tol<T>());
}

TYPED_TEST(KernelForward, CrossEntropyLosses) {
  using T = TypeParam;
  const int64_t N = 16, V = 50;
  std::mt19937 rng(8);
  const vec logits = quantize<T>(random_vec(rng, N * V, 3.0));
  const auto targets = ref::random_tokens(rng, N, V);
  auto ls = store<T>(logits);
  std::vector<float> losses(N);
  cross_entropy_fused(ls.data(), losses.data(), targets.data(), N, V, V, 1.0f);
  // Losses are fp32 computed from exact inputs, whatever T is.
  expect_close(tag<T>("cross_entropy_fused", "losses"), load(losses),
               ref::cross_entropy(logits, targets, N, V), forward_tol<float>());
}

// Gemma 2's final_logit_softcapping: the losses of X tanh(logits / X). Logits
// up to about 9 against caps of 2 and 5 (well into tanh's curve); the capped
// logits are rounded to T in place, so the tolerance is T's.
TYPED_TEST(KernelForward, CrossEntropyLossesOfSoftCappedLogits) {
  using T = TypeParam;
  const int64_t N = 16, V = 50;
  for (const float X : {2.0f, 5.0f}) {
    std::mt19937 rng(9);
    const vec logits = quantize<T>(random_vec(rng, N * V, 3.0));
    const auto targets = ref::random_tokens(rng, N, V);
    auto ls = store<T>(logits);
    std::vector<float> losses(N);
    cross_entropy_fused(ls.data(), losses.data(), targets.data(), N, V, V, 1.0f, X);
    expect_close(tag<T>("cross_entropy_fused", "losses softcap ") + std::to_string(X), load(losses),
                 ref::cross_entropy(ref::softcap(logits, X), targets, N, V), forward_tol<T>());
  }
}

}  // namespace
