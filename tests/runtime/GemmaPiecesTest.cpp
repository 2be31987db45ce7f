// GemmaPiecesTest: llama's options for Gemma's pieces on the CPU
// (runtime/cpu/llama.h) against double-precision references
// (LlamaBlockReference.h's block): every RMSNorm scaling by (1 + weight)
// (norm_plus_one), the MLP's gate GELU in its tanh form (GeGLU, gelu_gate),
// in a block that also norms q and k with a head size of its own (Gemma 3's
// shape), and Gemma 2's and 3's norms before and after each sub-block
// (block_norms = sandwich); d(input) and every parameter's gradient against
// central finite differences of the reference loss sum(out * R). And the embedding scaled by
// sqrt(width) (scale_embedding), with that scale rounded to the dtype as
// transformers rounds it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cpu/llama.h"
#include "tests/runtime/LlamaBlockReference.h"
#include "tests/runtime/Reference.h"

namespace llama_cases {
namespace {

using ref::vec;

// fp32 forward and backward (d(input) and every gradient, accumulated onto
// prior values) against the reference, with each head's q and k norms (Gemma
// 3's, which scale by (1 + weight) too) and a head size apart from width /
// heads. The norms' weights are small, as Gemma's start at 0, so that
// (1 + weight) is what the kernels must use.
TEST(GemmaBlock, PlusOneNormsAndGeGluMatchTheReference) {
  llama_dims d = small_dims(false, false);
  d.norm_plus_one = d.gelu_gate = true;
  expect_block_matches_the_reference(d, "gemma block", 23);
}

// Gemma 2's block: sandwich norms (a norm before and one after attention and
// the MLP, each after-norm before its residual add), (1 + weight) norms and
// GeGLU, no q/k norms; head size 6 apart from width / heads.
TEST(GemmaBlock, Gemma2SandwichNormsMatchTheReference) {
  llama_dims d = small_dims(false, false);
  d.qk_norm = false;
  d.sandwich_norm = d.norm_plus_one = d.gelu_gate = true;
  expect_block_matches_the_reference(d, "gemma2 block", 29);
}

// Gemma 3's block: Gemma 2's with each head's q and k norms.
TEST(GemmaBlock, Gemma3SandwichNormsAndQkNormsMatchTheReference) {
  llama_dims d = small_dims(false, false);
  d.sandwich_norm = d.norm_plus_one = d.gelu_gate = true;
  expect_block_matches_the_reference(d, "gemma3 block", 31);
}

// Piece by piece (o_proj and down_proj each with the norm after it) and a
// recompute equal the whole sandwich block, with and without q/k norms.
TEST(GemmaBlock, SandwichPieceByPieceAndRecomputeEqualTheWholeBlock) {
  for (bool qk : {false, true}) {
    SCOPED_TRACE(qk ? "gemma3" : "gemma2");
    llama_dims d = small_dims(false, false);
    d.qk_norm = qk;
    d.sandwich_norm = d.norm_plus_one = d.gelu_gate = true;
    expect_pieces_and_recompute_equal_the_whole_block(d, kLlamaPieces, 37);
  }
}

// The sandwich layouts: Gemma 3's (and without q/k norms Gemma 2's) tensor
// names in flat order; the pieces tile them, the norm before the MLP named
// as Gemma names it; no module a custom layer can replace.
TEST(GemmaBlock, SandwichLayoutsHaveGemmasTensors) {
  const block_model::ParamLayout& g3 =
      block_model::llama_params(block_model::LlamaTables{false, true, false, false, true});
  const block_model::ParamLayout& g2 =
      block_model::llama_params(block_model::LlamaTables{false, false, false, false, true});
  const char* const hf[] = {"input_layernorm.weight",
                            "self_attn.q_proj.weight",
                            "self_attn.q_norm.weight",
                            "self_attn.k_proj.weight",
                            "self_attn.k_norm.weight",
                            "self_attn.v_proj.weight",
                            "self_attn.o_proj.weight",
                            "post_attention_layernorm.weight",
                            "pre_feedforward_layernorm.weight",
                            "mlp.gate_proj.weight",
                            "mlp.up_proj.weight",
                            "mlp.down_proj.weight",
                            "post_feedforward_layernorm.weight"};
  ASSERT_EQ(g3.block.count, std::size(hf));
  ASSERT_EQ(g2.block.count, std::size(hf) - 2);
  for (size_t i = 0, j = 0; i < std::size(hf); ++i) {
    EXPECT_STREQ(g3.block[i].hf_name, hf[i]);
    if (i == 2 || i == 4) continue;  // q's and k's norms: Gemma 3's
    EXPECT_STREQ(g2.block[j++].hf_name, hf[i]);
  }
  for (const block_model::ParamLayout* l : {&g2, &g3}) {
    ASSERT_EQ(l->pieces.count, static_cast<size_t>(kLlamaPieces));
    EXPECT_EQ(l->modules.count, 0u);
    for (size_t i = 0; i + 1 < l->pieces.count; ++i)
      EXPECT_EQ(l->pieces[i].first_tensor + l->pieces[i].tensors, l->pieces[i + 1].first_tensor)
          << l->pieces[i].name;
    const block_model::Piece& last = l->pieces[kLlamaDown];
    EXPECT_EQ(static_cast<size_t>(last.first_tensor + last.tensors), l->block.count);
    EXPECT_STREQ(l->pieces[kLlamaRms2].name, "pre_feedforward_layernorm");
    EXPECT_EQ(l->pieces[kLlamaO].tensors, 2);
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
  llama_dims d;
  d.norm_eps = 1e-6f, d.norm_plus_one = true;
  ref::expect_close("rmsnorm (1 + w)", ref::load(out.data(), N * C), block_norm(x, w, N, C, d),
                    ref::forward_tol<float>());
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
