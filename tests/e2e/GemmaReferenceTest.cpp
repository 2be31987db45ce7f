// GemmaReferenceTest: fsdpgen's llama with Gemma's pieces (scale_embedding,
// norm_plus_one, activation = gelu_tanh; with head_dim) trains as Hugging
// Face transformers' GemmaForCausalLM does. tools/gemma_reference.py (torch,
// transformers; not needed here) wrote the fixture in
// tests/e2e/gemma_reference: the initial weights (model.safetensors, Hugging
// Face names, every RMSNorm's weight drawn near 0 rather than transformers'
// zeros), a token file and each step's loss and gradient norm of 6 AdamW
// steps run by transformers in fp64. The spec beside them is the same model
// (a head size of 16 where width / heads is 8, tied embeddings, norm_eps
// 1e-6) and run; it is built as it stands (one rank) and sharded over 2 ranks
// (full_shard) and 4 (hybrid_shard, shard groups of 2) with the same global
// batch, loaded with --init-from, and compared step by step.
//
// Tolerances: Llama's (LlamaReferenceTest.cpp), fsdpgen in fp32 against
// transformers in fp64.
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "gemma_reference";

constexpr double kLossTolerance = 3e-7;
constexpr double kNormTolerance = 4e-6;

class GemmaReference : public ::testing::TestWithParam<reference_layout> {};

TEST_P(GemmaReference, StepsMatchTransformers) {
  // The fixture's loss falls 15% over its 6 steps.
  expect_steps_match_reference(kFixture, "gemma.fsdp", GetParam(),
                               {kLossTolerance, kNormTolerance, 0, 0.1});
}

// The same weights as transformers' save_pretrained wrote them (config.json
// of model_type gemma, 4 shards and their index), loaded from the directory
// at world 2: the same steps.
TEST(GemmaModelDirectory, TrainsFromTheShardsTransformersSaved) {
  expect_model_directory_trains(kFixture, "gemma.fsdp", kReferenceLayouts[1], kLossTolerance);
}

// transformers' weights in, fsdpgen's out (F32, no step run, 2 ranks): every
// tensor's bytes unchanged, under the same names, the norms among them.
TEST(GemmaModelDirectory, WeightsRoundTripExactly) {
  expect_weights_round_trip(kFixture, "gemma.fsdp", 20,
                            "model.layers.1.post_attention_layernorm.weight");
}

INSTANTIATE_TEST_SUITE_P(Layouts, GemmaReference, ::testing::ValuesIn(kReferenceLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fsdpgen::test
