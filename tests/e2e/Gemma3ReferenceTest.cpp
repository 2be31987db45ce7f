// Gemma3ReferenceTest: fsdpgen's llama with Gemma 3's pieces (Gemma's
// scale_embedding, norm_plus_one and GeGLU; block_norms = sandwich, each
// head's qk_norm, head_dim, and layers alternating between a sliding window
// with its own rotary base and global attention whose rotary frequencies are
// divided by 8 as in Gemma 3 4B and larger: sliding_window, global_every,
// rope_local_theta, rope_scaling = linear) trains as Hugging Face transformers'
// Gemma3ForCausalLM does. tools/gemma3_reference.py (torch, transformers; not
// needed here) wrote the fixture in tests/e2e/gemma3_reference: the initial
// weights (model.safetensors, Hugging Face names, every RMSNorm's weight
// drawn near 0), a token file and each step's loss and gradient norm of 6
// AdamW steps run by transformers in fp64. The spec beside them is the same
// model and run; it is built as it stands (one rank) and sharded over 2 ranks
// (full_shard) and 4 (hybrid_shard, shard groups of 2) with the same global
// batch, loaded with --init-from, and compared step by step.
//
// Tolerances: Llama's (LlamaReferenceTest.cpp), fsdpgen in fp32 against
// transformers in fp64.
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "gemma3_reference";

constexpr double kLossTolerance = 3e-7;
constexpr double kNormTolerance = 4e-6;

class Gemma3Reference : public ::testing::TestWithParam<reference_layout> {};

TEST_P(Gemma3Reference, StepsMatchTransformers) {
  // The fixture's loss falls 1.7% over its 6 steps (lr 1e-3: tools/gemma3_reference.py).
  expect_steps_match_reference(kFixture, "gemma3.fsdp", GetParam(),
                               {kLossTolerance, kNormTolerance, 0, 0.01});
}

// The same weights as transformers' save_pretrained wrote them (config.json
// of model_type gemma3_text with layer_types and a rotary base per kind of
// layer, the global one's scaled linearly, 7 shards and their index), loaded from the directory at
// world 2: the same steps.
TEST(Gemma3ModelDirectory, TrainsFromTheShardsTransformersSaved) {
  expect_model_directory_trains(kFixture, "gemma3.fsdp", kReferenceLayouts[1], kLossTolerance);
}

// transformers' weights in, fsdpgen's out (F32, no step run, 2 ranks): every
// tensor's bytes unchanged, under the same names, the norms after each
// sub-block among them.
TEST(Gemma3ModelDirectory, WeightsRoundTripExactly) {
  expect_weights_round_trip(kFixture, "gemma3.fsdp", 54,
                            "model.layers.3.post_feedforward_layernorm.weight");
}

INSTANTIATE_TEST_SUITE_P(Layouts, Gemma3Reference, ::testing::ValuesIn(kReferenceLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fsdpgen::test
