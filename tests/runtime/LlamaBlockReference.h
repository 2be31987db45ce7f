// LlamaBlockReference: the llama block tests' shared double-precision
// reference of a whole block (written from LlamaCases.h's pieces,
// independently of runtime/) for the options that change its math: norms
// before or after each sub-block or both (block_norms), q and k norms per head or
// across heads (qk_norm), (1 + weight) norms (norm_plus_one), the GeGLU
// gate (gelu_gate), and attention's window, scale and softcap (attn_scale,
// attn_softcap); the CPU block run on T storage, whole or piece by piece;
// and the check of its forward and every gradient against the reference and
// central finite differences of the loss sum(out * R). Qwen2's biases keep
// their own reference (Qwen2BlockTest.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/llama.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"
#include "tests/runtime/LlamaCases.h"
#include "tests/runtime/Reference.h"

namespace llama_cases {

namespace block_model = fsdpgen::model;

inline constexpr double kBlockTheta = 10000.0;

// y (N, OC) = x (N, IC) w^T, w (OC, IC): nn.Linear without a bias, which is
// Reference.h's lm_head.
inline vec linear(const vec& x, const vec& w, int64_t N, int64_t IC, int64_t OC) {
  return ref::lm_head(x, w, N, IC, OC);
}

// GeGLU: gelu(gate) * up, GELU's tanh form (transformers' gelu_pytorch_tanh).
inline vec geglu(const vec& gate, const vec& up) {
  const vec g = ref::gelu(gate);
  vec out(g.size());
  for (size_t i = 0; i < g.size(); i++)
    out[i] = g[i] * up[i];
  return out;
}

// rms1_w and rms2_w: before attention and the MLP (pre norms) or after them
// (post norms, OLMo 2's post_attention_layernorm and post_feedforward_layernorm);
// with sandwich norms before them, and post_attn_w and post_mlp_w after.
struct block_ref {
  vec rms1_w, q_w, q_norm_w, k_w, k_norm_w, v_w, o_w, rms2_w, gate_w, up_w, down_w;
  vec post_attn_w, post_mlp_w;
};

struct block_out {
  vec q, k, v, out;  // q and k normed (with qk_norm) and rotated
};

// An RMSNorm of the block's kind: x rstd w, or x rstd (1 + w) (norm_plus_one).
inline vec block_norm(const vec& x, const vec& w, int64_t N, int64_t C, const llama_dims& d) {
  vec w1 = w;
  if (d.norm_plus_one)
    for (double& v : w1)
      v += 1.0;
  return rmsnorm(x, w1, N, C, d.norm_eps);
}

// q's or k's norm: each head's D values a row, or across heads all of them;
// none without qk_norm.
inline vec qk_norm(const vec& x, const vec& w, int64_t N, int64_t heads, const llama_dims& d) {
  if (!d.qk_norm) return x;
  const int64_t width = heads * d.D(), group = d.qk_norm_across_heads ? width : d.D();
  return block_norm(x, w, N * (width / group), group, d);
}

// Pre norms: h = x + attention(rms1(x)) o^T, out = h + mlp(rms2(h)); post
// norms (OLMo 2): h = x + rms1(attention(x) o^T), out = h + rms2(mlp(h));
// sandwich (Gemma 2 and 3): h = x + post_attn(attention(rms1(x)) o^T), out =
// h + post_mlp(mlp(rms2(h))); mlp(m) = (act(m gate^T) * (m up^T)) down^T, act
// SiLU or GELU (gelu_gate).
inline block_out block(const block_ref& p, const vec& x, const llama_dims& d) {
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q(), D = d.D();
  const vec a = d.post_norm ? x : block_norm(x, p.rms1_w, N, C, d);
  block_out r;
  r.q =
      rope(qk_norm(linear(a, p.q_w, N, C, Q), p.q_norm_w, N, d.H, d), N, d.T, d.H, D, kBlockTheta);
  r.k = rope(qk_norm(linear(a, p.k_w, N, C, KV), p.k_norm_w, N, d.KV_heads, d), N, d.T, d.KV_heads,
             D, kBlockTheta);
  r.v = linear(a, p.v_w, N, C, KV);
  const vec attn =
      gqa(r.q, r.k, r.v, d.B, d.T, d.H, d.KV_heads, D, d.window, d.attn_scale, d.attn_softcap);
  const vec attn_out = linear(attn, p.o_w, N, Q, C);
  const vec h = ref::add(x, d.post_norm       ? block_norm(attn_out, p.rms1_w, N, C, d)
                            : d.sandwich_norm ? block_norm(attn_out, p.post_attn_w, N, C, d)
                                              : attn_out);
  const vec m = d.post_norm ? h : block_norm(h, p.rms2_w, N, C, d);
  const vec gate = linear(m, p.gate_w, N, C, F), up = linear(m, p.up_w, N, C, F);
  const vec mlp_out = linear(d.gelu_gate ? geglu(gate, up) : swiglu(gate, up), p.down_w, N, F, C);
  r.out = ref::add(h, d.post_norm       ? block_norm(mlp_out, p.rms2_w, N, C, d)
                      : d.sandwich_norm ? block_norm(mlp_out, p.post_mlp_w, N, C, d)
                                        : mlp_out);
  return r;
}

// Width 16, 4 heads of 6 (q 24 wide), 2 kv heads (k and v 12 wide), qk-norm.
inline llama_dims small_dims(bool post_norm, bool across_heads) {
  llama_dims d;
  d.B = 2, d.T = 5, d.C = 16, d.H = 4, d.KV_heads = 2, d.F = 24, d.V = 50;
  d.qk_norm = true, d.head_dim = 6, d.norm_eps = 1e-6f;
  d.qk_norm_across_heads = across_heads, d.post_norm = post_norm;
  return d;
}

inline block_model::Dims layout_dims(const llama_dims& d) {
  block_model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  md.D = d.head_dim;
  return md;
}

inline block_model::LlamaTables tables(const llama_dims& d) {
  return {d.qkv_bias, d.qk_norm, d.qk_norm_across_heads, d.post_norm, d.sandwich_norm};
}

// A block's parameters drawn at random; its norms' weights near 1, as
// trained ones are, or near 0 where they scale by (1 + weight).
inline std::vector<float> random_params(const llama_dims& d, std::mt19937& rng) {
  const block_model::Table<block_model::Tensor> table = block_model::llama_params(tables(d)).block;
  std::vector<float> params = ref::store<float>(
      ref::random_vec(rng, block_model::offset_elems(table, table.count, layout_dims(d)), 0.3));
  if (d.norm_plus_one) return params;
  const auto p = llama_block_params_at<float>(params.data(), d);
  const int64_t q_norm = d.qk_norm ? (d.qk_norm_across_heads ? d.Q() : d.D()) : 0;
  const int64_t k_norm = d.qk_norm ? (d.qk_norm_across_heads ? d.KV() : d.D()) : 0;
  const int64_t post = d.sandwich_norm ? d.C : 0;
  for (auto [w, n] :
       {std::pair{p.q_norm_w, q_norm}, std::pair{p.k_norm_w, k_norm}, std::pair{p.rms1_w, d.C},
        std::pair{p.rms2_w, d.C}, std::pair{p.post_attn_w, post}, std::pair{p.post_mlp_w, post}})
    for (int64_t i = 0; i < n; i++)
      const_cast<float*>(w)[i] += 1.0f;
  return params;
}

template <class T>
struct block_run {
  std::vector<std::byte> saved, scratch;
  std::vector<float> cos, sin;
  std::vector<T> out, grads;
};

// A forward from x and backward from dout on T storage (gradients too), a
// call per range of `pieces`; grads start at `prior`.
template <class T>
void run(block_run<T>& b, const std::vector<T>& params, const std::vector<T>& prior,
         const std::vector<T>& x, const std::vector<T>& dout, const llama_dims& d,
         const std::vector<block_pieces>& pieces) {
  const block_model::ActivationLayout& layout = block_model::llama_activations(tables(d));
  const block_model::Dims md = layout_dims(d);
  b.saved.assign(block_model::slot_bytes(layout.block, md, d.N(), sizeof(T)), std::byte{0});
  b.scratch.assign(block_model::slot_bytes(layout.backward_scratch, md, d.N(), sizeof(T)),
                   std::byte{0});
  b.cos.resize(d.T * d.D() / 2), b.sin.resize(b.cos.size());
  rope_tables(b.cos.data(), b.sin.data(), d.T, d.D(), kBlockTheta, rope_scaling{});
  const llama_rope rope_t{b.cos.data(), b.sin.data()};
  static std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace ws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  const auto s = llama_block_saved_at<T>(b.saved.data(), d);
  const auto sc = llama_backward_scratch_at<T>(b.scratch.data(), d);
  std::copy(x.begin(), x.end(), s.input);
  const auto p = llama_block_params_at<T>(params.data(), d);
  b.grads = prior;
  const auto g = llama_block_grads_at<T>(b.grads.data(), d);
  b.out.assign(d.N() * d.C, from_float<T>(0.0f));
  for (const block_pieces& r : pieces)
    llama_block_forward(b.out.data(), p, s, rope_t, d, ws, r);
  std::copy(dout.begin(), dout.end(), sc.dres);
  for (auto r = pieces.rbegin(); r != pieces.rend(); ++r)
    llama_block_backward(g, p, s, sc, rope_t, d, ws, *r);
}

// The fp32 block (random parameters, input and d(out) from `seed`) against
// the reference: out, q, k, v as saved, d(input) and every parameter's
// gradient, added onto prior values, against finite differences.
inline void expect_block_matches_the_reference(const llama_dims& d, const std::string& what,
                                               unsigned seed = 17) {
  const int64_t N = d.N(), C = d.C, KV = d.KV(), F = d.F, Q = d.Q();
  const int64_t q_norm = d.qk_norm ? (d.qk_norm_across_heads ? Q : d.D()) : 0;
  const int64_t k_norm = d.qk_norm ? (d.qk_norm_across_heads ? KV : d.D()) : 0;
  std::mt19937 rng(seed);
  const std::vector<float> params = random_params(d, rng);
  const auto p = llama_block_params_at<float>(params.data(), d);
  auto as_vec = [](const float* x, int64_t n) { return x ? ref::load(x, n) : vec{}; };
  const block_ref r{as_vec(p.rms1_w, C),    as_vec(p.q_w, Q * C),       as_vec(p.q_norm_w, q_norm),
                    as_vec(p.k_w, KV * C),  as_vec(p.k_norm_w, k_norm), as_vec(p.v_w, KV * C),
                    as_vec(p.o_w, C * Q),   as_vec(p.rms2_w, C),        as_vec(p.gate_w, F * C),
                    as_vec(p.up_w, F * C),  as_vec(p.down_w, C * F),    as_vec(p.post_attn_w, C),
                    as_vec(p.post_mlp_w, C)};
  const vec prior = ref::random_vec(rng, params.size());  // the backward adds to it
  const vec x = ref::quantize<float>(ref::random_vec(rng, N * C));
  const vec R = ref::quantize<float>(ref::random_vec(rng, N * C));
  block_run<float> b;
  run(b, params, ref::store<float>(prior), ref::store<float>(x), ref::store<float>(R), d, {{}});
  const auto s = llama_block_saved_at<float>(b.saved.data(), d);
  const auto sc = llama_backward_scratch_at<float>(b.scratch.data(), d);
  const auto g = llama_block_grads_at<float>(b.grads.data(), d);

  const block_out want = block(r, x, d);
  const ref::tolerance fwd = ref::forward_tol<float>(), bwd = ref::backward_tol<float>();
  ref::expect_close(what + " out", as_vec(b.out.data(), N * C), want.out, fwd);
  ref::expect_close(what + " q (normed, rotated)", as_vec(s.q, N * Q), want.q, fwd);
  ref::expect_close(what + " k (normed, rotated)", as_vec(s.k, N * KV), want.k, fwd);
  ref::expect_close(what + " v", as_vec(s.v, N * KV), want.v, fwd);
  ref::expect_close(
      what + " d(input)", as_vec(sc.dres, N * C),
      ref::fd_grad(x, [&](const vec& xx) { return ref::dot(block(r, xx, d).out, R); }), bwd);
  struct grad_case {
    const char* name;
    vec block_ref::*member;
    float* got;  // its prior is the same offset into `prior`; null: not in this block
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
      {"post_attn_w", &block_ref::post_attn_w, g.post_attn_w},
      {"post_mlp_w", &block_ref::post_mlp_w, g.post_mlp_w},
  };
  for (const grad_case& c : cases) {
    if (c.got == nullptr) continue;
    const vec& w = r.*c.member;
    const vec want_g = ref::fd_grad(w, [&](const vec& ww) {
      block_ref q = r;
      q.*c.member = ww;
      return ref::dot(block(q, x, d).out, R);
    });
    const auto n = static_cast<int64_t>(w.size());
    const auto at = prior.begin() + (c.got - b.grads.data());
    ref::expect_close(what + " d" + c.name + " +=", as_vec(c.got, n),
                      ref::add(vec(at, at + n), want_g), bwd);
  }
}

// Run piece by piece (each of the block's `pieces` a range, the scratch
// carrying what flows between them), the block equals it run whole, bit for
// bit; a recompute (out == nullptr) refills every saved row, the norms'
// statistics included.
inline void expect_pieces_and_recompute_equal_the_whole_block(const llama_dims& d, int pieces,
                                                              unsigned seed = 5) {
  std::mt19937 rng(seed);
  const std::vector<float> params = random_params(d, rng);
  const std::vector<float> prior(params.size(), 0.0f);
  const std::vector<float> x = ref::store<float>(ref::random_vec(rng, d.N() * d.C));
  const std::vector<float> dout = ref::store<float>(ref::random_vec(rng, d.N() * d.C));
  block_run<float> whole, parts;
  run(whole, params, prior, x, dout, d, {{}});
  std::vector<block_pieces> each_piece;
  for (int i = 0; i < pieces; ++i)
    each_piece.push_back({i, i + 1});
  run(parts, params, prior, x, dout, d, each_piece);
  EXPECT_EQ(parts.out, whole.out);
  EXPECT_EQ(parts.grads, whole.grads);
  EXPECT_GT(std::count_if(whole.grads.begin(), whole.grads.end(), [](float v) { return v != 0; }),
            static_cast<long>(params.size() / 2));

  // Recompute: the saved rows from the input alone.
  const block_model::ActivationLayout& layout = block_model::llama_activations(tables(d));
  std::vector<std::byte> saved(whole.saved.size(), std::byte{0});
  const auto s = llama_block_saved_at<float>(saved.data(), d);
  std::copy(x.begin(), x.end(), s.input);
  static std::vector<float> ws_buf(kCpuGemmWorkspaceBytes / sizeof(float));
  const gemm_workspace ws{ws_buf.data(), static_cast<int64_t>(ws_buf.size())};
  llama_block_forward<float>(nullptr, llama_block_params_at<float>(params.data(), d), s,
                             llama_rope{whole.cos.data(), whole.sin.data()}, d, ws);
  const block_model::Dims md = layout_dims(d);
  for (size_t row = 0; row < layout.block.count; ++row) {
    if (!block_model::present(layout.block[row], md)) continue;
    const int64_t at = block_model::offset_bytes(layout.block, row, md, d.N(), 4);
    const int64_t end = block_model::offset_bytes(layout.block, row + 1, md, d.N(), 4);
    EXPECT_TRUE(std::equal(saved.begin() + at, saved.begin() + end, whole.saved.begin() + at))
        << layout.block[row].name;
  }
}

}  // namespace llama_cases
