// Gemma2ReferenceTest: fsdpgen's llama with Gemma 2's pieces (Gemma's
// scale_embedding, norm_plus_one and GeGLU; block_norms = sandwich, head_dim,
// layers alternating between a sliding window and global attention:
// sliding_window, global_every; query_pre_attn_scalar, attention_softcap and
// logit_softcap) trains as Hugging Face transformers' Gemma2ForCausalLM
// does. tools/gemma2_reference.py (torch, transformers; not needed here)
// wrote the fixture in tests/e2e/gemma2_reference: the initial weights
// (model.safetensors, drawn with a standard deviation of 0.2 so that scores
// and logits reach their caps; every RMSNorm's weight near 0), a token file
// and each step's loss and gradient norm of 6 AdamW steps run by transformers
// in fp64. The spec beside them is the same model and run; it is built as it
// stands (one rank) and sharded over 2 ranks (full_shard) and 4
// (hybrid_shard, shard groups of 2) with the same global batch, loaded with
// --init-from, and compared step by step.
//
// Tolerances: Llama's (LlamaReferenceTest.cpp), fsdpgen in fp32 against
// transformers in fp64.
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "gemma2_reference";

constexpr double kLossTolerance = 3e-7;
constexpr double kNormTolerance = 4e-6;

class Gemma2Reference : public ::testing::TestWithParam<reference_layout> {};

TEST_P(Gemma2Reference, StepsMatchTransformers) {
  // The fixture's loss falls 2% over its 6 steps (lr 3e-3: tools/gemma2_reference.py).
  expect_steps_match_reference(kFixture, "gemma2.fsdp", GetParam(),
                               {kLossTolerance, kNormTolerance, 0, 0.01});
}

// The same weights as transformers' save_pretrained wrote them (config.json
// of model_type gemma2 with its caps, query scalar and layer_types, 7 shards
// and their index), loaded from the directory at world 2: the same steps.
TEST(Gemma2ModelDirectory, TrainsFromTheShardsTransformersSaved) {
  expect_model_directory_trains(kFixture, "gemma2.fsdp", kReferenceLayouts[1], kLossTolerance);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Gemma2Reference, ::testing::ValuesIn(kReferenceLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fsdpgen::test
