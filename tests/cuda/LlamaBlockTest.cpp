// LlamaBlockTest (cuda): runtime/cuda/llama.h's block for each family the
// llama options make (Qwen2's q, k and v biases; Qwen3's per-head q and k
// norms with a head size apart from width / heads; OLMo 2's post-norm block
// with its norms across heads; Gemma's (1 + weight) norms and GeGLU; Gemma
// 3's sandwich norms with q and k norms) forward and backward against its
// CPU twin (runtime/cpu/llama.h, which tests/runtime/Qwen2BlockTest.cpp,
// Qwen3BlockTest.cpp, Olmo2BlockTest.cpp and GemmaPiecesTest.cpp check
// against double references) on the same random stored inputs, for fp32 and
// bf16 storage and gradients: the output, q, k and v as saved, d(input) and
// every gradient. Then, on the device alone, the block run piece by piece
// equals it run whole, and a recompute (out == nullptr) refills every saved
// row, as tests/runtime/LlamaBlockReference.h checks on the CPU. Gemma's
// embedding scale against the CPU's too. Tolerances and helpers:
// Gpt2Cases.h. Skips, saying why, where no CUDA device is present.
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
#include "tests/runtime/LlamaBlockReference.h"
#include "tests/runtime/Reference.h"

namespace gpt2_cases {
namespace {

namespace model = fsdpgen::model;

struct family_case {
  const char* name;
  llama_dims d;
  int pieces;  // the block's pieces (llama_piece or llama_post_piece)
};

// Width 64, 4 query heads, 2 kv heads, 2 sequences of 16 (of 37 where one
// attention tile is not whole).
llama_dims base_dims() {
  llama_dims d;
  d.B = 2, d.T = 16, d.C = 64, d.H = 4, d.KV_heads = 2, d.F = 96, d.V = 50, d.norm_eps = 1e-6f;
  return d;
}

std::vector<family_case> families() {
  std::vector<family_case> out;
  llama_dims d = base_dims();
  d.qkv_bias = true;
  out.push_back({"qwen2", d, kLlamaPieces});
  d = base_dims();
  d.qk_norm = true, d.head_dim = 24;  // q 96 wide, k and v 48
  out.push_back({"qwen3", d, kLlamaPieces});
  d = base_dims();
  d.T = 37, d.qk_norm = d.qk_norm_across_heads = d.post_norm = true;
  out.push_back({"olmo2", d, kLlamaPostPieces});
  d = base_dims();
  d.norm_plus_one = d.gelu_gate = true;
  out.push_back({"gemma", d, kLlamaPieces});
  d = base_dims();
  d.T = 37, d.head_dim = 32, d.qk_norm = d.sandwich_norm = d.norm_plus_one = d.gelu_gate = true;
  out.push_back({"gemma3", d, kLlamaPieces});
  return out;
}

using llama_cases::layout_dims;
using llama_cases::tables;

// llama_cases' parameters (norm weights near 1, or near 0 where they scale
// by (1 + weight)) stored as T.
template <class T>
std::vector<T> random_params(const llama_dims& d, std::mt19937& rng) {
  return store<T>(load(llama_cases::random_params(d, rng)));
}

// One block on the device: its buffers, outputs starting as NaN.
template <class T, class G>
struct device_block {
  nan_vec<T> params, out;
  nan_vec<G> grads;
  nan_vec<std::byte> saved, scratch;
  device_vec<float> rope;
  device_block(const std::vector<T>& p, const std::vector<G>& g0, const std::vector<float>& tables,
               int64_t saved_bytes, int64_t scratch_bytes, int64_t out_elems)
      : params(p),
        out(out_elems),
        grads(g0),
        saved(saved_bytes),
        scratch(scratch_bytes),
        rope(tables) {}
  // A forward from x and a backward from dout, a call per range of
  // `pieces`, as LlamaBlockReference.h's run on the CPU.
  void run(const std::vector<T>& x, const std::vector<T>& dout, const llama_dims& d,
           const std::vector<block_pieces>& pieces, gpu_exec& g) {
    const auto s = llama_block_saved_at<T>(saved.get(), d);
    const auto sc = llama_backward_scratch_at<T>(scratch.get(), d);
    to_device(s.input, x.data(), d.N() * d.C);
    to_device(sc.dres, dout.data(), d.N() * d.C);
    const auto p = llama_block_params_at<T>(params.get(), d);
    const auto gr = llama_block_grads_at<G>(grads.get(), d);
    const llama_rope r = llama_rope_at(rope.get(), d);
    for (const block_pieces& range : pieces)
      llama_block_forward(out.get(), p, s, r, d, g, range);
    for (auto range = pieces.rbegin(); range != pieces.rend(); ++range)
      llama_block_backward(gr, p, s, sc, r, d, g, *range);
  }
};

template <class P>
class CudaLlamaBlock : public Gpt2Fixture {};
using SameTypes = ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<bf16, bf16>>;
TYPED_TEST_SUITE(CudaLlamaBlock, SameTypes, ref::StorageGradNames);

TYPED_TEST(CudaLlamaBlock, EachFamilyMatchesTheCpu) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  for (const family_case& f : families()) {
    const llama_dims& d = f.d;
    const int64_t N = d.N(), C = d.C, KV = d.KV(), Q = d.Q();
    const model::Dims md = layout_dims(d);
    const model::Table<model::Tensor> table = model::llama_params(tables(d)).block;
    const model::ActivationLayout& layout = model::llama_activations(tables(d));
    std::mt19937 rng(900);
    const auto params = random_params<T>(d, rng);
    const auto x = random_stored<T>(rng, N * C);
    const auto dout = random_stored<T>(rng, N * C);
    const auto grads0 = random_stored<G>(rng, params.size());
    std::vector<float> tables_host(d.T * d.D());  // cos, then sin
    rope_tables(tables_host.data(), tables_host.data() + d.T * d.D() / 2, d.T, d.D(), 10000.0,
                rope_scaling{});

    // The CPU twin.
    const int64_t saved_bytes = model::slot_bytes(layout.block, md, N, sizeof(T));
    const int64_t scratch_bytes = model::slot_bytes(layout.backward_scratch, md, N, sizeof(T));
    std::vector<std::byte> saved(saved_bytes), scratch(scratch_bytes);
    const auto s = llama_block_saved_at<T>(saved.data(), d);
    const auto sc = llama_backward_scratch_at<T>(scratch.data(), d);
    std::copy(x.begin(), x.end(), s.input);
    std::copy(dout.begin(), dout.end(), sc.dres);
    std::vector<T> out(N * C);
    std::vector<G> grads = grads0;
    const auto p = llama_block_params_at<T>(params.data(), d);
    const llama_rope rope = llama_rope_at(tables_host.data(), d);
    llama_block_forward(out.data(), p, s, rope, d, cpu_workspace());
    llama_block_backward(llama_block_grads_at<G>(grads.data(), d), p, s, sc, rope, d,
                         cpu_workspace());

    // The CUDA one.
    device_block<T, G> b(params, grads0, tables_host, saved_bytes, scratch_bytes, N * C);
    b.run(x, dout, d, {{}}, this->g);
    this->sync();
    const auto sd = llama_block_saved_at<T>(b.saved.get(), d);
    const auto scd = llama_backward_scratch_at<T>(b.scratch.get(), d);

    const std::string block_name = std::string(f.name) + " block";
    const std::string prefix = ref::tag<T, G>(block_name.c_str(), "");
    expect_close_scaled(prefix + "out", b.out.download(), out, layer_tol<T>());
    expect_close_scaled(prefix + "q", from_device(sd.q, N * Q), std::vector<T>(s.q, s.q + N * Q),
                        layer_tol<T>());
    expect_close_scaled(prefix + "k", from_device(sd.k, N * KV), std::vector<T>(s.k, s.k + N * KV),
                        layer_tol<T>());
    expect_close_scaled(prefix + "v", from_device(sd.v, N * KV), std::vector<T>(s.v, s.v + N * KV),
                        layer_tol<T>());
    expect_close_scaled(prefix + "d(input)", from_device(scd.dres, N * C),
                        std::vector<T>(sc.dres, sc.dres + N * C), layer_tol<T>());
    const std::vector<G> got = b.grads.download();
    for (size_t i = 0; i < table.count; ++i) {
      const int64_t at = model::offset_elems(table, i, md), n = table[i].shape.elems(md);
      expect_close_scaled(
          prefix + "d" + table[i].name, std::vector<G>(got.begin() + at, got.begin() + at + n),
          std::vector<G>(grads.begin() + at, grads.begin() + at + n), grad_tol<T, G>());
    }

    // Piece by piece on the device (the scratch carrying what flows between
    // pieces): the same kernels in the same order, so the same bits.
    device_block<T, G> parts(params, grads0, tables_host, saved_bytes, scratch_bytes, N * C);
    std::vector<block_pieces> each_piece;
    for (int i = 0; i < f.pieces; ++i)
      each_piece.push_back({i, i + 1});
    parts.run(x, dout, d, each_piece, this->g);
    // A recompute from the input alone into a third saved slot.
    nan_vec<std::byte> again(saved_bytes);
    const auto sr = llama_block_saved_at<T>(again.get(), d);
    to_device(sr.input, x.data(), N * C);
    llama_block_forward<T>(nullptr, llama_block_params_at<T>(b.params.get(), d), sr,
                           llama_rope_at(b.rope.get(), d), d, this->g);
    this->sync();
    EXPECT_EQ(load(parts.out.download()), load(b.out.download())) << prefix << "out by pieces";
    EXPECT_EQ(load(parts.grads.download()), load(got)) << prefix << "grads by pieces";
    const std::vector<std::byte> whole_saved = b.saved.download();
    const std::vector<std::byte> recomputed = again.download();
    for (size_t row = 0; row < layout.block.count; ++row) {
      if (!model::present(layout.block[row], md)) continue;
      const int64_t at = model::offset_bytes(layout.block, row, md, N, sizeof(T));
      const int64_t end = model::offset_bytes(layout.block, row + 1, md, N, sizeof(T));
      EXPECT_TRUE(
          std::equal(recomputed.begin() + at, recomputed.begin() + end, whole_saved.begin() + at))
          << prefix << "recomputed " << layout.block[row].name;
    }
  }
}

// Gemma's embedding (scale_embedding): rows times sqrt(C) rounded to T, and
// their gradients scaled the same way into dwte.
TYPED_TEST(CudaLlamaBlock, GemmaEmbeddingIsScaledAsOnTheCpu) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  llama_dims d = base_dims();
  d.scale_embedding = d.norm_plus_one = d.gelu_gate = true;
  const int64_t N = d.N(), C = d.C, V = d.V;
  const model::Dims md = layout_dims(d);
  const int64_t scratch_bytes =
      model::slot_bytes(model::llama_activations(tables(d)).backward_scratch, md, N, sizeof(T));
  std::mt19937 rng(901);
  const auto wte = random_stored<T>(rng, V * C);
  const auto dout = random_stored<T>(rng, N * C);
  const auto dwte0 = random_stored<G>(rng, V * C);
  std::vector<int32_t> tokens(N);
  for (int32_t& t : tokens)
    t = static_cast<int32_t>(rng() % V);

  std::vector<T> out(N * C);
  std::vector<G> dwte = dwte0;
  std::vector<std::byte> scratch(scratch_bytes);
  const auto sc = llama_backward_scratch_at<T>(scratch.data(), d);
  std::copy(dout.begin(), dout.end(), sc.dres);
  llama_embed_forward(out.data(), tokens.data(), wte.data(), d);
  llama_embed_backward(dwte.data(), tokens.data(), sc, d);

  nan_vec<T> wte_d(wte), out_d(N * C);
  nan_vec<G> dwte_d(dwte0);
  nan_vec<std::byte> scratch_d(scratch_bytes);
  device_vec<int32_t> tokens_d(tokens);
  const auto scd = llama_backward_scratch_at<T>(scratch_d.get(), d);
  to_device(scd.dres, dout.data(), N * C);
  llama_embed_forward(out_d.get(), tokens_d.get(), wte_d.get(), d, this->g);
  llama_embed_backward(dwte_d.get(), tokens_d.get(), scd, d, this->g);
  this->sync();
  const std::string prefix = ref::tag<T, G>("gemma embedding", "");
  expect_close_scaled(prefix + "out", out_d.download(), out, op_tol<T>());
  expect_close_scaled(prefix + "dwte +=", dwte_d.download(), dwte, grad_tol<T, G>());
}

}  // namespace
}  // namespace gpt2_cases
