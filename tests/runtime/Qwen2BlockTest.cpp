// Qwen2BlockTest: a llama block with qkv_bias (Qwen2's: biases on q, k and v,
// runtime/cpu/llama.h) against a double-precision reference written from
// LlamaCases.h's pieces: each bias added after its projection and before its
// rotation; each bias's gradient against central finite differences of the
// reference loss sum(out * R).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/llama.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"
#include "tests/runtime/LlamaCases.h"
#include "tests/runtime/Reference.h"

namespace llama_cases {
namespace {

namespace model = fsdpgen::model;
using ref::vec;

constexpr double kTheta = 10000.0;

// y (N, OC) = x (N, IC) w^T + b, w (OC, IC).
vec linear(const vec& x, const vec& w, const vec& b, int64_t N, int64_t IC, int64_t OC) {
  vec y(N * OC);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = b.empty() ? 0.0 : b[o];
      for (int64_t i = 0; i < IC; i++)
        s += x[n * IC + i] * w[o * IC + i];
      y[n * OC + o] = s;
    }
  return y;
}

struct block_ref {
  vec rms1_w, q_w, q_b, k_w, k_b, v_w, v_b, o_w, rms2_w, gate_w, up_w, down_w;
};

struct block_out {
  vec q, k, v, out;  // q and k after the rotation
};

// One Qwen2 block: x + attention(rope(q), rope(k), v) o^T, then + the SwiGLU MLP.
block_out block(const block_ref& p, const vec& x, const llama_dims& d, double eps) {
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F;
  const vec h = rmsnorm(x, p.rms1_w, N, C, eps);
  block_out r;
  r.q = rope(linear(h, p.q_w, p.q_b, N, C, C), N, d.T, d.H, d.D(), kTheta);
  r.k = rope(linear(h, p.k_w, p.k_b, N, C, KV), N, d.T, d.KV_heads, d.D(), kTheta);
  r.v = linear(h, p.v_w, p.v_b, N, C, KV);
  const vec attn = gqa(r.q, r.k, r.v, d.B, d.T, d.H, d.KV_heads, d.D());
  const vec res2 = ref::add(x, linear(attn, p.o_w, {}, N, C, C));
  const vec h2 = rmsnorm(res2, p.rms2_w, N, C, eps);
  const vec mlp = swiglu(linear(h2, p.gate_w, {}, N, C, F), linear(h2, p.up_w, {}, N, C, F));
  r.out = ref::add(res2, linear(mlp, p.down_w, {}, N, F, C));
  return r;
}

vec as_vec(const float* p, int64_t n) {
  return ref::load(p, n);
}

// fp32 forward (out, and q, k, v as saved) and backward (the biases'
// gradients, accumulated onto prior values) against the reference.
TEST(Qwen2Block, BiasesAddBeforeTheRotationAndTheirGradientsAreTheTokenSums) {
  llama_dims d;
  d.B = 2, d.T = 5, d.C = 16, d.H = 4, d.KV_heads = 2, d.F = 24, d.V = 50, d.qkv_bias = true;
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F;
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  const model::Table<model::Tensor> table = model::llama_params(true).block;
  std::mt19937 rng(7);
  std::vector<float> params =
      ref::store<float>(ref::random_vec(rng, model::offset_elems(table, table.count, md), 0.3));
  std::vector<float> grads(params.size(), 0.0f);
  const auto p = llama_block_params_at<float>(params.data(), d);
  const auto g = llama_block_grads_at<float>(grads.data(), d);
  ASSERT_NE(p.q_b, nullptr);
  const block_ref r{as_vec(p.rms1_w, C),     as_vec(p.q_w, C * C),  as_vec(p.q_b, C),
                    as_vec(p.k_w, KV * C),   as_vec(p.k_b, KV),     as_vec(p.v_w, KV * C),
                    as_vec(p.v_b, KV),       as_vec(p.o_w, C * C),  as_vec(p.rms2_w, C),
                    as_vec(p.gate_w, F * C), as_vec(p.up_w, F * C), as_vec(p.down_w, C * F)};
  // Prior gradients of the biases: the backward adds to them.
  const vec prior_q = ref::random_vec(rng, C), prior_k = ref::random_vec(rng, KV),
            prior_v = ref::random_vec(rng, KV);
  std::copy(prior_q.begin(), prior_q.end(), g.q_b);
  std::copy(prior_k.begin(), prior_k.end(), g.k_b);
  std::copy(prior_v.begin(), prior_v.end(), g.v_b);
  const vec x = ref::quantize<float>(ref::random_vec(rng, N * C));
  const vec R = ref::quantize<float>(ref::random_vec(rng, N * C));

  std::vector<std::byte> saved(model::slot_bytes(model::kLlamaBlockSaved, md, N, 4));
  std::vector<std::byte> scratch(model::slot_bytes(model::kLlamaBackwardScratch, md, N, 4));
  std::vector<float> cos(d.T * d.D() / 2), sin(cos.size());
  rope_tables(cos.data(), sin.data(), d.T, d.D(), kTheta, rope_scaling{});
  const llama_rope rope_t{cos.data(), sin.data()};
  static std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace ws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  const auto s = llama_block_saved_at<float>(saved.data(), d);
  const auto sc = llama_backward_scratch_at<float>(scratch.data(), d);
  const std::vector<float> xs = ref::store<float>(x), Rs = ref::store<float>(R);
  std::copy(xs.begin(), xs.end(), s.input);
  std::vector<float> out(N * C);
  llama_block_forward(out.data(), p, s, rope_t, d, ws);
  std::copy(Rs.begin(), Rs.end(), sc.dres);
  llama_block_backward(g, p, s, sc, rope_t, d, ws);

  const double eps = d.norm_eps;
  const block_out want = block(r, x, d, eps);
  const ref::tolerance fwd = ref::forward_tol<float>(), bwd = ref::backward_tol<float>();
  ref::expect_close("qwen2 block out", as_vec(out.data(), N * C), want.out, fwd);
  ref::expect_close("qwen2 block q (biased, rotated)", as_vec(s.q, N * C), want.q, fwd);
  ref::expect_close("qwen2 block k (biased, rotated)", as_vec(s.k, N * KV), want.k, fwd);
  ref::expect_close("qwen2 block v (biased)", as_vec(s.v, N * KV), want.v, fwd);
  auto loss_with = [&](vec block_ref::*bias) {
    return [&, bias](const vec& b) {
      block_ref q = r;
      q.*bias = b;
      return ref::dot(block(q, x, d, eps).out, R);
    };
  };
  ref::expect_close("qwen2 block dq_b +=", as_vec(g.q_b, C),
                    ref::add(prior_q, ref::fd_grad(r.q_b, loss_with(&block_ref::q_b))), bwd);
  ref::expect_close("qwen2 block dk_b +=", as_vec(g.k_b, KV),
                    ref::add(prior_k, ref::fd_grad(r.k_b, loss_with(&block_ref::k_b))), bwd);
  ref::expect_close("qwen2 block dv_b +=", as_vec(g.v_b, KV),
                    ref::add(prior_v, ref::fd_grad(r.v_b, loss_with(&block_ref::v_b))), bwd);
}

// The layout: Llama's rows with q_b, k_b and v_b after their weights, each
// in its weight's piece; without qkv_bias the family's tensors have no bias.
TEST(Qwen2Block, BiasRowsSitInTheirWeightsPieces) {
  const model::ParamLayout& qwen = model::llama_params(true);
  const model::ParamLayout& llama = model::llama_params(false);
  ASSERT_EQ(qwen.block.count, llama.block.count + 3);
  ASSERT_EQ(qwen.pieces.count, llama.pieces.count);
  for (const model::Tensor& t : llama.block)
    EXPECT_NO_THROW(model::index_of(qwen.block, t.name)) << t.name;
  for (const char* bias : {"q_b", "k_b", "v_b"})
    EXPECT_THROW(model::index_of(llama.block, bias), std::logic_error) << bias;
  for (size_t i = 0; i < qwen.pieces.count; ++i) {
    const model::Piece& p = qwen.pieces[i];
    EXPECT_STREQ(p.name, llama.pieces[i].name);
    const bool biased = i == kLlamaQ || i == kLlamaK || i == kLlamaV;
    ASSERT_EQ(p.tensors, biased ? 2 : 1) << p.name;
    EXPECT_STREQ(qwen.block[p.first_tensor].name, llama.block[llama.pieces[i].first_tensor].name);
    if (biased)
      EXPECT_STREQ(qwen.block[p.first_tensor + 1].hf_name, (std::string(p.name) + ".bias").c_str());
    if (i + 1 < qwen.pieces.count)
      EXPECT_EQ(p.first_tensor + p.tensors, qwen.pieces[i + 1].first_tensor) << p.name;
  }
}

}  // namespace
}  // namespace llama_cases
