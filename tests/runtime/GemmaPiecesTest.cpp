// GemmaPiecesTest: llama's options for Gemma's pieces on the CPU
// (runtime/cpu/llama.h) against double-precision references written from
// LlamaCases.h's pieces: every RMSNorm scaling by (1 + weight)
// (norm_plus_one), the MLP's gate GELU in its tanh form (GeGLU, gelu_gate),
// in a block that also norms q and k with a head size of its own (Gemma 3's
// shape); d(input) and every parameter's gradient against central finite
// differences of the reference loss sum(out * R). And the embedding scaled by
// sqrt(width) (scale_embedding), with that scale rounded to the dtype as
// transformers rounds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
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

// Gemma's RMSNorm: x rstd (1 + w).
vec rmsnorm_plus_one(const vec& x, const vec& w, int64_t N, int64_t C, double eps) {
  vec w1 = w;
  for (double& v : w1)
    v += 1.0;
  return rmsnorm(x, w1, N, C, eps);
}

// GeGLU: gelu(gate) * up, GELU's tanh form (transformers' gelu_pytorch_tanh).
vec geglu(const vec& gate, const vec& up) {
  const vec g = ref::gelu(gate);
  vec out(g.size());
  for (size_t i = 0; i < g.size(); i++)
    out[i] = g[i] * up[i];
  return out;
}

struct block_ref {
  vec rms1_w, q_w, q_norm_w, k_w, k_norm_w, v_w, o_w, rms2_w, gate_w, up_w, down_w;
};

// One block with Gemma's norms and gate: x + attention(rope(norm(q)),
// rope(norm(k)), v) o^T, then + the GeGLU MLP; every norm (1 + weight).
vec block(const block_ref& p, const vec& x, const llama_dims& d, double eps) {
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q(), D = d.D();
  const vec h = rmsnorm_plus_one(x, p.rms1_w, N, C, eps);
  const vec q = rope(rmsnorm_plus_one(linear(h, p.q_w, N, C, Q), p.q_norm_w, N * d.H, D, eps), N,
                     d.T, d.H, D, kTheta);
  const vec k =
      rope(rmsnorm_plus_one(linear(h, p.k_w, N, C, KV), p.k_norm_w, N * d.KV_heads, D, eps), N, d.T,
           d.KV_heads, D, kTheta);
  const vec v = linear(h, p.v_w, N, C, KV);
  const vec attn = gqa(q, k, v, d.B, d.T, d.H, d.KV_heads, D);
  const vec res2 = ref::add(x, linear(attn, p.o_w, N, Q, C));
  const vec h2 = rmsnorm_plus_one(res2, p.rms2_w, N, C, eps);
  const vec mlp = geglu(linear(h2, p.gate_w, N, C, F), linear(h2, p.up_w, N, C, F));
  return ref::add(res2, linear(mlp, p.down_w, N, F, C));
}

// fp32 forward and backward (d(input) and every gradient, accumulated onto
// prior values) against the reference. The norms' weights are small, as
// Gemma's start at 0, so that (1 + weight) is what the kernels must use.
TEST(GemmaBlock, PlusOneNormsAndGeGluMatchTheReference) {
  llama_dims d;
  d.B = 2, d.T = 5, d.C = 16, d.H = 4, d.KV_heads = 2, d.F = 24, d.V = 50;
  d.qk_norm = true, d.head_dim = 6;
  d.norm_plus_one = true, d.gelu_gate = true;
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q(), D = d.D();
  model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  md.D = d.head_dim;
  const model::Table<model::Tensor> table = model::llama_params(false, true).block;
  std::mt19937 rng(23);
  std::vector<float> params =
      ref::store<float>(ref::random_vec(rng, model::offset_elems(table, table.count, md), 0.3));
  const auto p = llama_block_params_at<float>(params.data(), d);
  auto as_vec = [](const float* x, int64_t n) { return ref::load(x, n); };
  const block_ref r{as_vec(p.rms1_w, C),   as_vec(p.q_w, Q * C),   as_vec(p.q_norm_w, D),
                    as_vec(p.k_w, KV * C), as_vec(p.k_norm_w, D),  as_vec(p.v_w, KV * C),
                    as_vec(p.o_w, C * Q),  as_vec(p.rms2_w, C),    as_vec(p.gate_w, F * C),
                    as_vec(p.up_w, F * C), as_vec(p.down_w, C * F)};
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
  const ref::tolerance fwd = ref::forward_tol<float>(), bwd = ref::backward_tol<float>();
  ref::expect_close("gemma block out", as_vec(out.data(), N * C), block(r, x, d, eps), fwd);
  ref::expect_close(
      "gemma block d(input)", as_vec(sc.dres, N * C),
      ref::fd_grad(x, [&](const vec& xx) { return ref::dot(block(r, xx, d, eps), R); }), bwd);
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
      return ref::dot(block(q, x, d, eps), R);
    });
    const auto n = static_cast<int64_t>(w.size());
    const auto at = prior.begin() + (c.got - grads.data());
    ref::expect_close(std::string("gemma block d") + c.name + " +=", as_vec(c.got, n),
                      ref::add(vec(at, at + n), want_g), bwd);
  }
}

// The final norm, through the head's forward, scales by (1 + weight) too:
// its output against the reference's.
TEST(GemmaBlock, TheFinalNormScalesByOnePlusWeight) {
  const int64_t N = 6, C = 8;
  std::mt19937 rng(5);
  const vec x = ref::quantize<float>(ref::random_vec(rng, N * C));
  const vec w = ref::quantize<float>(ref::random_vec(rng, C, 0.2));
  const std::vector<float> xs = ref::store<float>(x), ws = ref::store<float>(w);
  std::vector<float> out(N * C), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), xs.data(), ws.data(), N, C, 1e-6f, 1.0f);
  ref::expect_close("rmsnorm (1 + w)", ref::load(out.data(), N * C),
                    rmsnorm_plus_one(x, w, N, C, 1e-6), ref::forward_tol<float>());
}

// The embedding's rows times sqrt(C), and the gradient into its rows times
// the same, each product rounded to T once; in bf16 the scale is rounded to
// bf16 first, as transformers casts it to the weights' dtype (sqrt(3072) =
// 55.43 becomes 55.5). Compared exactly: the products are the kernels'.
template <class T>
void expect_scaled_embedding(int64_t C, float want_scale) {
  llama_dims d;
  d.B = 1, d.T = 3, d.C = C, d.H = 1, d.KV_heads = 1, d.F = 4, d.V = 5;
  d.scale_embedding = true;
  const int64_t N = d.N();
  std::mt19937 rng(7);
  const std::vector<T> wte = ref::store<T>(ref::random_vec(rng, d.V * C));
  const std::vector<T> dres = ref::store<T>(ref::random_vec(rng, N * C));
  const int32_t tokens[] = {3, 0, 3};
  std::vector<T> out(N * C);
  llama_embed_forward(out.data(), tokens, wte.data(), d);
  std::vector<float> dwte_want(d.V * C, 0.0f);
  int64_t wrong = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t c = 0; c < C; c++) {
      const float want = to_float(from_float<T>(to_float(wte[tokens[n] * C + c]) * want_scale));
      wrong += to_float(out[n * C + c]) != want;
      dwte_want[tokens[n] * C + c] +=
          to_float(from_float<T>(to_float(dres[n * C + c]) * want_scale));
    }
  EXPECT_EQ(wrong, 0) << "of " << N * C << " scaled rows' values (C " << C << ")";
  std::vector<T> dres_s = dres;
  llama_backward_scratch<T> sc{};
  sc.dres = dres_s.data();
  std::vector<float> dwte(d.V * C, 0.0f);
  llama_embed_backward(dwte.data(), tokens, sc, d);
  EXPECT_EQ(dwte, dwte_want) << "the scaled embedding's gradient (C " << C << ")";
}

TEST(GemmaEmbedding, RowsAndTheirGradientsAreScaledBySqrtWidth) {
  expect_scaled_embedding<float>(16, 4.0f);
  expect_scaled_embedding<float>(32, static_cast<float>(std::sqrt(32.0)));
  expect_scaled_embedding<bf16>(3072, 55.5f);
}

}  // namespace
}  // namespace llama_cases
