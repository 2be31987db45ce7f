// Gemma2SoftcapTest: llama's options for Gemma 2's attention and head on the
// CPU (runtime/cpu/llama.h), each on its own, against double-precision
// references: attention scores scaled by query_pre_attn_scalar^-0.5
// (attn_scale) and soft-capped (attn_softcap) in a whole block, pre- and
// post-norm (LlamaBlockReference.h's block; d(input) and every gradient
// against central finite differences); the head's logits soft-capped before
// the cross-entropy (logit_softcap), its losses and d(logits) with a padded
// vocabulary. The kernels themselves: LlamaKernelTest, KernelForwardTest,
// KernelBackwardTest.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/llama.h"
#include "tests/runtime/LlamaBlockReference.h"
#include "tests/runtime/Reference.h"

namespace llama_cases {
namespace {

using ref::vec;

// Scores of about 1 here against caps of 0.5 and 0.8: tanh's curve, not its
// straight start. Scales of 24^-0.5 and 10^-0.5 against heads of 6.
TEST(Gemma2Block, ScaledAndSoftCappedAttentionMatchesTheReference) {
  llama_dims d = small_dims(false, false);
  d.attn_scale = 1.0f / std::sqrt(24.0f), d.attn_softcap = 0.5f;
  expect_block_matches_the_reference(d, "pre-norm block, scale 24^-0.5, softcap 0.5", 31);
  d.attn_scale = 0.0f;  // the head size's
  expect_block_matches_the_reference(d, "pre-norm block, softcap 0.5", 32);
  d = small_dims(true, true);
  d.attn_scale = 1.0f / std::sqrt(10.0f), d.attn_softcap = 0.8f;
  expect_block_matches_the_reference(d, "post-norm block, scale 10^-0.5, softcap 0.8", 33);
}

// The head: logits = rmsnorm(x) head_w^T, capped X tanh(l / X) before the
// loss; the losses against the reference's and d(logits) (the head's
// backward input, in place of the logits) against finite differences of the
// summed scaled loss in the raw logits. V = 50 of Vp = 64 columns.
TEST(Gemma2Head, LogitsAreSoftCappedBeforeTheLoss) {
  llama_dims d;
  d.B = 2, d.T = 3, d.C = 16, d.H = 2, d.KV_heads = 2, d.F = 8, d.V = 50, d.V_padded = 64;
  d.norm_eps = 1e-6f, d.logit_softcap = 2.5f;
  const int64_t N = d.N(), C = d.C, V = d.V, Vp = d.Vp();
  const float dloss_scale = 0.25f;
  std::mt19937 rng(41);
  const vec x = ref::quantize<float>(ref::random_vec(rng, N * C));
  const vec norm_w = ref::quantize<float>(ref::random_vec(rng, C, 0.3, 1.0));
  vec head_w = ref::quantize<float>(ref::random_vec(rng, V * C, 1.5));
  const std::vector<int32_t> targets = ref::random_tokens(rng, N, V);
  std::vector<float> xs = ref::store<float>(x), ws = ref::store<float>(norm_w);
  std::vector<float> hs = ref::store<float>(head_w);
  hs.resize(Vp * C, 0.0f);  // the padded rows are zero
  std::vector<float> output(N * C), rstd(N), logits(N * Vp), losses(N);
  std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace gws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  llama_head_forward(logits.data(), losses.data(), targets.data(), ws.data(), hs.data(),
                     llama_final_norm_saved<float>{rstd.data(), xs.data(), output.data()}, d,
                     dloss_scale, gws);
  const vec raw = linear(block_norm(x, norm_w, N, C, d), head_w, N, C, V);
  ref::expect_close("head losses, logit softcap 2.5", ref::load(losses.data(), N),
                    ref::cross_entropy(ref::softcap(raw, d.logit_softcap), targets, N, V),
                    ref::forward_tol<float>());
  const vec want = ref::fd_grad(raw, [&](const vec& l) {
    double s = 0;
    for (double loss : ref::cross_entropy(ref::softcap(l, d.logit_softcap), targets, N, V))
      s += dloss_scale * loss;
    return s;
  });
  vec got;
  for (int64_t n = 0; n < N; n++)
    for (int64_t v = 0; v < Vp; v++) {
      if (v < V)
        got.push_back(logits[n * Vp + v]);
      else
        ASSERT_EQ(logits[n * Vp + v], 0.0f) << "padded column " << v << " of row " << n;
    }
  ref::expect_close("head d(logits), logit softcap 2.5", got, want, ref::backward_tol<float>());
}

}  // namespace
}  // namespace llama_cases
