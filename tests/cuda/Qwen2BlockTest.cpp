// Qwen2BlockTest (cuda): runtime/cuda/llama.h's block with qkv_bias (Qwen2's
// biases on q, k and v) forward and backward against its CPU twin
// (runtime/cpu/llama.h, which tests/runtime/Qwen2BlockTest.cpp checks against a
// double reference) on the same random stored inputs, for fp32 and bf16
// storage and gradients: the output, q, k and v as saved, d(input) and every
// gradient, the biases' among them. Tolerances and helpers: Gpt2Cases.h.
// Skips, saying why, where no CUDA device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/llama.h"
#include "runtime/cuda/llama.h"
#include "runtime/model/llama.h"
#include "runtime/rope.h"
#include "tests/cuda/Gpt2Cases.h"
#include "tests/runtime/Reference.h"

namespace gpt2_cases {
namespace {

namespace model = fsdpgen::model;

template <class P>
class CudaQwen2Block : public Gpt2Fixture {};
using SameTypes = ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<bf16, bf16>>;
TYPED_TEST_SUITE(CudaQwen2Block, SameTypes, ref::StorageGradNames);

TYPED_TEST(CudaQwen2Block, ForwardAndBackwardMatchTheCpu) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  llama_dims d;
  d.B = 2, d.T = 16, d.C = 64, d.H = 4, d.KV_heads = 2, d.F = 96, d.V = 50, d.qkv_bias = true;
  const int64_t N = d.N(), C = d.C, KV = d.KV();
  const model::Dims md{d.C, d.F, d.H, d.T, d.KV(), true};
  const model::Table<model::Tensor> table = model::llama_params(true).block;
  const int64_t elems = model::offset_elems(table, table.count, md);
  std::mt19937 rng(900);
  const auto params = random_stored<T>(rng, elems, 0.2);
  const auto x = random_stored<T>(rng, N * C);
  const auto dout = random_stored<T>(rng, N * C);
  const auto grads0 = random_stored<G>(rng, elems);
  std::vector<float> cos(d.T * d.D() / 2), sin(cos.size());
  rope_tables(cos.data(), sin.data(), d.T, d.D(), 10000.0, rope_scaling{});

  // The CPU twin.
  const int64_t saved_bytes = model::slot_bytes(model::kLlamaBlockSaved, md, N, sizeof(T));
  const int64_t scratch_bytes = model::slot_bytes(model::kLlamaBackwardScratch, md, N, sizeof(T));
  std::vector<std::byte> saved(saved_bytes), scratch(scratch_bytes);
  const auto s = llama_block_saved_at<T>(saved.data(), d);
  const auto sc = llama_backward_scratch_at<T>(scratch.data(), d);
  std::copy(x.begin(), x.end(), s.input);
  std::copy(dout.begin(), dout.end(), sc.dres);
  std::vector<T> out(N * C);
  std::vector<G> grads = grads0;
  const auto p = llama_block_params_at<T>(params.data(), d);
  ASSERT_NE(p.q_b, nullptr);
  llama_block_forward(out.data(), p, s, llama_rope{cos.data(), sin.data()}, d, cpu_workspace());
  llama_block_backward(llama_block_grads_at<G>(grads.data(), d), p, s, sc,
                       llama_rope{cos.data(), sin.data()}, d, cpu_workspace());

  // The CUDA one, its outputs starting as NaN.
  nan_vec<T> params_d(params), out_d(N * C);
  nan_vec<G> grads_d(grads0);
  nan_vec<std::byte> saved_d(saved_bytes), scratch_d(scratch_bytes);
  device_vec<float> cos_d(cos), sin_d(sin);
  const llama_rope rope_d{cos_d.get(), sin_d.get()};
  const auto sd = llama_block_saved_at<T>(saved_d.get(), d);
  const auto scd = llama_backward_scratch_at<T>(scratch_d.get(), d);
  to_device(sd.input, x.data(), N * C);
  to_device(scd.dres, dout.data(), N * C);
  const auto pd = llama_block_params_at<T>(params_d.get(), d);
  llama_block_forward(out_d.get(), pd, sd, rope_d, d, this->g);
  llama_block_backward(llama_block_grads_at<G>(grads_d.get(), d), pd, sd, scd, rope_d, d, this->g);
  this->sync();

  const std::string prefix = ref::tag<T, G>("qwen2 block", "");
  expect_close_scaled(prefix + "out", out_d.download(), out, layer_tol<T>());
  expect_close_scaled(prefix + "q", from_device(sd.q, N * C), std::vector<T>(s.q, s.q + N * C),
                      layer_tol<T>());
  expect_close_scaled(prefix + "k", from_device(sd.k, N * KV), std::vector<T>(s.k, s.k + N * KV),
                      layer_tol<T>());
  expect_close_scaled(prefix + "v", from_device(sd.v, N * KV), std::vector<T>(s.v, s.v + N * KV),
                      layer_tol<T>());
  expect_close_scaled(prefix + "d(input)", from_device(scd.dres, N * C),
                      std::vector<T>(sc.dres, sc.dres + N * C), layer_tol<T>());
  const std::vector<G> got = grads_d.download();
  for (size_t i = 0; i < table.count; ++i) {
    const int64_t at = model::offset_elems(table, i, md), n = table[i].shape.elems(md);
    expect_close_scaled(
        prefix + "d" + table[i].name, std::vector<G>(got.begin() + at, got.begin() + at + n),
        std::vector<G>(grads.begin() + at, grads.begin() + at + n), grad_tol<T, G>());
  }
}

}  // namespace
}  // namespace gpt2_cases
