// The example custom layers (examples/layers) and the tests' own
// (tests/layers/custom: LayerNorm, RmsNorm, CausalSelfAttention) against
// finite differences of their own forward, and GeluMlp against the built-in gpt2 block's MLP
// pieces, which it must equal bit for bit (the same kernels in the same
// order). Every member is a view into buffers the test owns, as the planner's
// arena would be.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "examples/layers/adapter.h"
#include "examples/layers/gelu_mlp.h"
#include "examples/layers/swiglu_mlp.h"
#include "runtime/cpu/gpt2.h"
#include "tests/layers/custom/causal_attention.h"
#include "tests/layers/custom/layer_norm.h"
#include "tests/layers/custom/rms_norm.h"

namespace {

constexpr int64_t kTokens = 6, kModel = 8, kFf = 20;

gemm_workspace workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  return {buf.data(), static_cast<int64_t>(buf.size())};
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v)
    x = dist(rng);
  return v;
}

// A layer's parameters, saved arrays and scratch in buffers of their own.
struct Buffers {
  std::vector<std::vector<float>> params, grads, arrays;
  float* param(size_t n, std::mt19937& rng) {
    params.push_back(random_floats(rng, n, 0.3f));
    grads.emplace_back(n, 0.0f);
    return params.back().data();
  }
  float* grad() { return grads.back().data(); }
  float* array(size_t n) {
    arrays.emplace_back(n, 0.0f);
    return arrays.back().data();
  }
};

GeluMlp<float, float> gelu_mlp(Buffers& b, std::mt19937& rng) {
  GeluMlp<float, float> m;
  m.hyper = {kModel, kFf};
  m.fc_w.value = b.param(kModel * kFf, rng), m.fc_w.grad = b.grad();
  m.fc_b.value = b.param(kFf, rng), m.fc_b.grad = b.grad();
  m.proj_w.value = b.param(kFf * kModel, rng), m.proj_w.grad = b.grad();
  m.proj_b.value = b.param(kModel, rng), m.proj_b.grad = b.grad();
  m.pre.data = b.array(kTokens * kFf);
  m.act.data = b.array(kTokens * kFf);
  m.dact.data = b.array(kTokens * kFf);
  return m;
}

SwiGluMlp<float, float> swiglu_mlp(Buffers& b, std::mt19937& rng) {
  SwiGluMlp<float, float> m;
  m.hyper = {kModel, kFf};
  m.gate_w.value = b.param(kFf * kModel, rng), m.gate_w.grad = b.grad();
  m.up_w.value = b.param(kFf * kModel, rng), m.up_w.grad = b.grad();
  m.down_w.value = b.param(kModel * kFf, rng), m.down_w.grad = b.grad();
  m.gate.data = b.array(kTokens * kFf);
  m.up.data = b.array(kTokens * kFf);
  m.hidden.data = b.array(kTokens * kFf);
  m.dgate_up.data = b.array(2 * kTokens * kFf);
  return m;
}

// loss = sum(y * r) of the layer's forward at x, in double.
template <class Layer>
double loss(const Layer& m, const std::vector<float>& x, const std::vector<float>& r) {
  std::vector<float> y(kTokens * kModel);
  m.forward(x.data(), y.data(), kTokens, fsdpgen::layer::Cpu{workspace()});
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i)
    s += static_cast<double>(y[i]) * r[i];
  return s;
}

// d(loss)/d(v[i]) by central differences (h = 1e-2; fp32 forward: the
// truncation and rounding errors are both about 1e-4 relative).
template <class Layer>
double numeric(const Layer& m, std::vector<float>& x, const std::vector<float>& r, float* v,
               size_t i) {
  const float keep = v[i], h = 1e-2f;
  v[i] = keep + h;
  const double up = loss(m, x, r);
  v[i] = keep - h;
  const double down = loss(m, x, r);
  v[i] = keep;
  return (up - down) / (2.0 * h);
}

// backward's dx and every parameter gradient against finite differences.
template <class Layer>
void check_gradients(const char* name, Layer& m, Buffers& b, std::mt19937& rng) {
  std::vector<float> x = random_floats(rng, kTokens * kModel, 1.0f);
  const std::vector<float> r = random_floats(rng, kTokens * kModel, 1.0f);
  std::vector<float> y(kTokens * kModel), dx(kTokens * kModel, 123.0f);  // dx is overwritten
  const fsdpgen::layer::Cpu cpu{workspace()};
  m.forward(x.data(), y.data(), kTokens, cpu);
  m.backward(x.data(), r.data(), dx.data(), kTokens, cpu);
  auto expect = [&](const std::string& what, double analytic, double fd) {
    EXPECT_NEAR(analytic, fd, 2e-3 + 1e-2 * std::abs(fd)) << name << " " << what;
  };
  for (size_t i = 0; i < x.size(); i += 5)
    expect("dx[" + std::to_string(i) + "]", dx[i], numeric(m, x, r, x.data(), i));
  for (size_t t = 0; t < b.params.size(); ++t)
    for (size_t i = 0; i < b.params[t].size(); i += 7)
      expect("grad of tensor " + std::to_string(t) + " [" + std::to_string(i) + "]", b.grads[t][i],
             numeric(m, x, r, b.params[t].data(), i));
}

TEST(ExampleLayers, GeluMlpBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  Buffers b;
  GeluMlp<float, float> m = gelu_mlp(b, rng);
  check_gradients("GeluMlp", m, b, rng);
}

TEST(ExampleLayers, SwiGluMlpBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(6);
  Buffers b;
  SwiGluMlp<float, float> m = swiglu_mlp(b, rng);
  check_gradients("SwiGluMlp", m, b, rng);
}

TEST(ExampleLayers, AdapterBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(8);
  Buffers b;
  Adapter<float, float> m;
  m.hyper = {kModel, 3};
  m.down_w.value = b.param(kModel * 3, rng), m.down_w.grad = b.grad();
  m.down_b.value = b.param(3, rng), m.down_b.grad = b.grad();
  m.up_w.value = b.param(3 * kModel, rng), m.up_w.grad = b.grad();  // random here, not zero
  m.up_b.value = b.param(kModel, rng), m.up_b.grad = b.grad();
  m.pre.data = b.array(kTokens * 3);
  m.act.data = b.array(kTokens * 3);
  m.dact.data = b.array(kTokens * 3);
  check_gradients("Adapter", m, b, rng);
}

TEST(TestLayers, LayerNormBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(9);
  Buffers b;
  LayerNorm<float, float> m;
  m.hyper = {kModel};
  m.w.value = b.param(kModel, rng), m.w.grad = b.grad();
  m.b.value = b.param(kModel, rng), m.b.grad = b.grad();
  m.mean.data = b.array(kTokens);
  m.rstd.data = b.array(kTokens);
  check_gradients("LayerNorm", m, b, rng);
}

TEST(TestLayers, RmsNormBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(10);
  Buffers b;
  RmsNorm<float, float> m;
  m.hyper = {kModel};
  m.w.value = b.param(kModel, rng), m.w.grad = b.grad();
  m.rstd.data = b.array(kTokens);
  check_gradients("RmsNorm", m, b, rng);
}

// Two sequences of 3 tokens, 2 heads of 4.
TEST(TestLayers, CausalSelfAttentionBackwardMatchesFiniteDifferences) {
  std::mt19937 rng(11);
  Buffers b;
  constexpr int64_t kHeads = 2, kContext = 3;
  CausalSelfAttention<float, float> m;
  m.hyper = {kModel, kHeads, kContext};
  m.qkv_w.value = b.param(kModel * 3 * kModel, rng), m.qkv_w.grad = b.grad();
  m.qkv_b.value = b.param(3 * kModel, rng), m.qkv_b.grad = b.grad();
  m.proj_w.value = b.param(kModel * kModel, rng), m.proj_w.grad = b.grad();
  m.proj_b.value = b.param(kModel, rng), m.proj_b.grad = b.grad();
  m.qkv.data = b.array(kTokens * 3 * kModel);
  m.att.data = b.array(kTokens * kModel);
  m.probs.data = b.array(kTokens * kHeads * kContext);
  m.datt.data = b.array(kTokens * kModel);
  m.dqkv.data = b.array(kTokens * 3 * kModel);
  m.dprobs.data = b.array(kTokens * kHeads * kContext);
  check_gradients("CausalSelfAttention", m, b, rng);
}

// GeluMlp is the built-in block's mlp.c_fc and mlp.c_proj pieces: run on the
// block's ln2 output with a zero residual, the block writes exactly y, and
// its backward exactly the same gradients.
TEST(ExampleLayers, GeluMlpEqualsTheBuiltInBlocksMlp) {
  std::mt19937 rng(7);
  Buffers b;
  GeluMlp<float, float> m = gelu_mlp(b, rng);
  const std::vector<float> x = random_floats(rng, kTokens * kModel, 1.0f);
  const std::vector<float> dy = random_floats(rng, kTokens * kModel, 1.0f);
  std::vector<float> y(kTokens * kModel), dx(kTokens * kModel);
  const fsdpgen::layer::Cpu cpu{workspace()};
  m.forward(x.data(), y.data(), kTokens, cpu);
  m.backward(x.data(), dy.data(), dx.data(), kTokens, cpu);

  gpt2_dims d;
  d.B = 1, d.T = kTokens, d.C = kModel, d.H = 2, d.F = kFf, d.V = 16;
  std::vector<std::byte> slot(gpt2_block_saved_bytes(d, 4)),
      scratch_buf(gpt2_backward_scratch_bytes(d, 4));
  const auto s = gpt2_block_saved_at<float>(slot.data(), d);
  const auto sc = gpt2_backward_scratch_at<float>(scratch_buf.data(), d);
  std::copy(x.begin(), x.end(), s.ln2);
  std::fill(s.res2, s.res2 + kTokens * kModel, 0.0f);
  gpt2_block_params<float> p{};
  p.fc_w = b.params[0].data(), p.fc_b = b.params[1].data();
  p.fc2_w = b.params[2].data(), p.fc2_b = b.params[3].data();
  std::vector<std::vector<float>> g;
  for (const auto& t : b.params)
    g.emplace_back(t.size(), 0.0f);
  gpt2_block_grads<float> pg{};
  pg.fc_w = g[0].data(), pg.fc_b = g[1].data(), pg.fc2_w = g[2].data(), pg.fc2_b = g[3].data();
  std::vector<float> out(kTokens * kModel);
  gpt2_block_forward(out.data(), p, s, d, workspace(), block_pieces{kGpt2Fc, kGpt2Pieces});
  EXPECT_EQ(out, y);
  std::copy(dy.begin(), dy.end(), sc.dres);
  gpt2_block_backward(pg, p, s, sc, d, workspace(), block_pieces{kGpt2Fc, kGpt2Pieces});
  EXPECT_EQ(std::vector<float>(sc.dtmp, sc.dtmp + kTokens * kModel), dx);  // d(ln2)
  for (size_t t = 0; t < g.size(); ++t)
    EXPECT_EQ(g[t], b.grads[t]) << "tensor " << t;
}

}  // namespace
