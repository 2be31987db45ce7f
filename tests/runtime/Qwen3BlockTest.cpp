// Qwen3BlockTest: a llama block with qk_norm and a head size apart from
// width / heads (Qwen3's: each head's q and k pass an RMSNorm of one head's
// size before the rotation; q is heads * head_dim wide, o maps it back to the
// width; runtime/cpu/llama.h) against a double-precision reference written from
// LlamaCases.h's pieces; d(input) and every parameter's gradient against
// central finite differences of the reference loss sum(out * R).
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

// y (N, OC) = x (N, IC) w^T, w (OC, IC).
vec linear(const vec& x, const vec& w, int64_t N, int64_t IC, int64_t OC) {
  vec y(N * OC);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = 0.0;
      for (int64_t i = 0; i < IC; i++)
        s += x[n * IC + i] * w[o * IC + i];
      y[n * OC + o] = s;
    }
  return y;
}

struct block_ref {
  vec rms1_w, q_w, q_norm_w, k_w, k_norm_w, v_w, o_w, rms2_w, gate_w, up_w, down_w;
};

struct block_out {
  vec q, k, v, out;  // q and k normed and rotated
};

// One Qwen3 block: x + attention(rope(norm(q)), rope(norm(k)), v) o^T, then
// + the SwiGLU MLP; each head's D values of q and of k one RMSNorm row.
block_out block(const block_ref& p, const vec& x, const llama_dims& d, double eps) {
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q(), D = d.D();
  const vec h = rmsnorm(x, p.rms1_w, N, C, eps);
  block_out r;
  r.q =
      rope(rmsnorm(linear(h, p.q_w, N, C, Q), p.q_norm_w, N * d.H, D, eps), N, d.T, d.H, D, kTheta);
  r.k = rope(rmsnorm(linear(h, p.k_w, N, C, KV), p.k_norm_w, N * d.KV_heads, D, eps), N, d.T,
             d.KV_heads, D, kTheta);
  r.v = linear(h, p.v_w, N, C, KV);
  const vec attn = gqa(r.q, r.k, r.v, d.B, d.T, d.H, d.KV_heads, D);
  const vec res2 = ref::add(x, linear(attn, p.o_w, N, Q, C));
  const vec h2 = rmsnorm(res2, p.rms2_w, N, C, eps);
  const vec mlp = swiglu(linear(h2, p.gate_w, N, C, F), linear(h2, p.up_w, N, C, F));
  r.out = ref::add(res2, linear(mlp, p.down_w, N, F, C));
  return r;
}

// fp32 forward (out, and q, k, v as saved) and backward (d(input) and every
// gradient, accumulated onto prior values) against the reference.
TEST(Qwen3Block, QkNormAndHeadDimMatchTheReference) {
  llama_dims d;
  d.B = 2, d.T = 5, d.C = 16, d.H = 4, d.KV_heads = 2, d.F = 24, d.V = 50;
  d.qk_norm = true, d.head_dim = 6;  // q: 4 * 6 = 24 wide, k and v 12
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q(), D = d.D();
  ASSERT_EQ(Q, 24);
  model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  md.D = d.head_dim;
  const model::Table<model::Tensor> table = model::llama_params(false, true).block;
  std::mt19937 rng(11);
  std::vector<float> params =
      ref::store<float>(ref::random_vec(rng, model::offset_elems(table, table.count, md), 0.3));
  const auto p = llama_block_params_at<float>(params.data(), d);
  ASSERT_NE(p.q_norm_w, nullptr);
  ASSERT_EQ(p.q_b, nullptr);
  // The norms' weights near 1, as trained ones are.
  for (const float* w : {p.q_norm_w, p.k_norm_w})
    for (int64_t i = 0; i < D; i++)
      const_cast<float*>(w)[i] += 1.0f;
  auto as_vec = [](const float* x, int64_t n) { return ref::load(x, n); };
  const block_ref r{as_vec(p.rms1_w, C),   as_vec(p.q_w, Q * C),   as_vec(p.q_norm_w, D),
                    as_vec(p.k_w, KV * C), as_vec(p.k_norm_w, D),  as_vec(p.v_w, KV * C),
                    as_vec(p.o_w, C * Q),  as_vec(p.rms2_w, C),    as_vec(p.gate_w, F * C),
                    as_vec(p.up_w, F * C), as_vec(p.down_w, C * F)};
  // Prior gradients: the backward adds to them.
  const vec prior = ref::random_vec(rng, params.size());
  std::vector<float> grads = ref::store<float>(prior);
  const auto g = llama_block_grads_at<float>(grads.data(), d);
  const vec x = ref::quantize<float>(ref::random_vec(rng, N * C));
  const vec R = ref::quantize<float>(ref::random_vec(rng, N * C));

  const model::ActivationLayout& layout = model::llama_activations(true);
  std::vector<std::byte> saved(model::slot_bytes(layout.block, md, N, 4));
  std::vector<std::byte> scratch(model::slot_bytes(layout.backward_scratch, md, N, 4));
  std::vector<float> cos(d.T * D / 2), sin(cos.size());
  rope_tables(cos.data(), sin.data(), d.T, D, kTheta, rope_scaling{});
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
  ref::expect_close("qwen3 block out", as_vec(out.data(), N * C), want.out, fwd);
  ref::expect_close("qwen3 block q (normed, rotated)", as_vec(s.q, N * Q), want.q, fwd);
  ref::expect_close("qwen3 block k (normed, rotated)", as_vec(s.k, N * KV), want.k, fwd);
  ref::expect_close("qwen3 block v", as_vec(s.v, N * KV), want.v, fwd);
  ref::expect_close(
      "qwen3 block d(input)", as_vec(sc.dres, N * C),
      ref::fd_grad(x, [&](const vec& xx) { return ref::dot(block(r, xx, d, eps).out, R); }), bwd);
  struct grad_case {
    const char* name;
    vec block_ref::*member;
    float* got;  // its prior is the same offset into `prior`
  };
  const grad_case cases[] = {
      {"rms1_w", &block_ref::rms1_w, g.rms1_w},
      {"q_w", &block_ref::q_w, g.q_w},
      {"q_norm_w", &block_ref::q_norm_w, g.q_norm_w},
      {"k_w", &block_ref::k_w, g.k_w},
      {"k_norm_w", &block_ref::k_norm_w, g.k_norm_w},
      {"v_w", &block_ref::v_w, g.v_w},
      {"o_w", &block_ref::o_w, g.o_w},
      {"rms2_w", &block_ref::rms2_w, g.rms2_w},
      {"gate_w", &block_ref::gate_w, g.gate_w},
      {"up_w", &block_ref::up_w, g.up_w},
      {"down_w", &block_ref::down_w, g.down_w},
  };
  for (const grad_case& c : cases) {
    const vec& w = r.*c.member;
    const vec want_g = ref::fd_grad(w, [&](const vec& ww) {
      block_ref q = r;
      q.*c.member = ww;
      return ref::dot(block(q, x, d, eps).out, R);
    });
    const auto n = static_cast<int64_t>(w.size());
    const auto at = prior.begin() + (c.got - grads.data());
    ref::expect_close(std::string("qwen3 block d") + c.name + " +=", as_vec(c.got, n),
                      ref::add(vec(at, at + n), want_g), bwd);
  }
}

// The layout: Llama's rows with q_norm_w and k_norm_w (one head's size) after
// q's and k's weights, each in its weight's piece; q and o sized by the head
// size, not the width.
TEST(Qwen3Block, NormRowsSitInTheirWeightsPieces) {
  const model::ParamLayout& qwen = model::llama_params(false, true);
  const model::ParamLayout& llama = model::llama_params(false);
  ASSERT_EQ(qwen.block.count, llama.block.count + 2);
  ASSERT_EQ(qwen.pieces.count, llama.pieces.count);
  for (const model::Tensor& t : llama.block) {
    EXPECT_NO_THROW(model::index_of(qwen.block, t.name)) << t.name;
  }
  for (const char* norm : {"q_norm_w", "k_norm_w"}) {
    EXPECT_THROW(model::index_of(llama.block, norm), std::logic_error) << norm;
  }
  for (size_t i = 0; i < qwen.pieces.count; ++i) {
    const model::Piece& p = qwen.pieces[i];
    EXPECT_STREQ(p.name, llama.pieces[i].name);
    const bool normed = i == kLlamaQ || i == kLlamaK;
    ASSERT_EQ(p.tensors, normed ? 2 : 1) << p.name;
    EXPECT_STREQ(qwen.block[p.first_tensor].name, llama.block[llama.pieces[i].first_tensor].name);
    if (normed)
      EXPECT_STREQ(qwen.block[p.first_tensor + 1].hf_name,
                   (std::string(p.name).substr(0, 11) + "_norm.weight").c_str());
    if (i + 1 < qwen.pieces.count)
      EXPECT_EQ(p.first_tensor + p.tensors, qwen.pieces[i + 1].first_tensor) << p.name;
  }
  // Qwen3-0.6B's shape: q is 16 * 128 = 2048 wide, o maps it to 1024.
  model::Dims d{1024, 3072, 16, 4096, 8 * 128, true};
  d.D = 128;
  const model::Tensor& q = qwen.block[model::index_of(qwen.block, "q_w")];
  const model::Tensor& o = qwen.block[model::index_of(qwen.block, "o_w")];
  const model::Tensor& qn = qwen.block[model::index_of(qwen.block, "q_norm_w")];
  EXPECT_EQ(q.shape.dims[0](d), 2048);
  EXPECT_EQ(q.shape.dims[1](d), 1024);
  EXPECT_EQ(o.shape.dims[0](d), 1024);
  EXPECT_EQ(o.shape.dims[1](d), 2048);
  EXPECT_EQ(qn.shape.elems(d), 128);
  EXPECT_EQ(qwen.pieces[kLlamaO].in(d)*qwen.pieces[kLlamaO].out(d), 2048 * 1024);
}

}  // namespace
}  // namespace llama_cases
