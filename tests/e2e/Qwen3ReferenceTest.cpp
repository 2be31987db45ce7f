// Qwen3ReferenceTest: fsdpgen's llama with qk_norm and head_dim trains as
// Hugging Face transformers' Qwen3ForCausalLM does. tools/qwen3_reference.py
// (torch, transformers; not needed here) wrote the fixture in
// tests/e2e/qwen3_reference: the initial weights (model.safetensors, Hugging
// Face names, the q and k norms' weights drawn near 1 rather than
// transformers' ones), a token file and each step's loss and gradient norm of
// 6 AdamW steps run by transformers in fp64. The spec beside them is the same
// model (a head size of 16 where width / heads is 8, tied embeddings,
// rope_theta 1e6, norm_eps 1e-6) and run; it is built as it stands (one rank)
// and sharded over 2 ranks (full_shard) and 4 (hybrid_shard, shard groups of
// 2) with the same global batch, loaded with --init-from, and compared step by
// step.
//
// Tolerances: Llama's (LlamaReferenceTest.cpp), fsdpgen in fp32 against
// transformers in fp64. The loss falls 9.5% over the steps.
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "qwen3_reference";

constexpr double kLossTolerance = 1.5e-6;
constexpr double kNormTolerance = 2e-5;

class Qwen3Reference : public ::testing::TestWithParam<reference_layout> {};

TEST_P(Qwen3Reference, StepsMatchTransformers) {
  // The fixture's loss falls 9.5% over its 6 steps.
  expect_steps_match_reference(kFixture, "qwen3.fsdp", GetParam(),
                               {kLossTolerance, kNormTolerance, 0, 0.05});
}

// The same weights as transformers' save_pretrained wrote them (config.json
// of model_type qwen3, 4 shards and their index), loaded from the directory
// at world 2: the same steps.
TEST(Qwen3ModelDirectory, TrainsFromTheShardsTransformersSaved) {
  const nlohmann::json expected = nlohmann::json::parse(file_bytes(kFixture / "expected.json"));
  const std::vector<double> losses = expected.at("losses");
  const reference_layout& l = kReferenceLayouts[1];
  const std::filesystem::path dir = e2e_dir(std::string("qwen3_reference_hf_") + l.name);
  const std::filesystem::path bin = build_binary(dir, reference_spec(kFixture, "qwen3.fsdp", l));
  const CmdResult r =
      run_binary(l.world, bin,
                 fmt::format("--metrics metrics.jsonl --init-from {}", (kFixture / "hf").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<double> got = read_losses(dir / "metrics.jsonl");
  ASSERT_EQ(got.size(), losses.size()) << r.out;
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_LE(relative(got[s], losses[s]), kLossTolerance) << l.name << " step " << s + 1;
}

// transformers' weights in, fsdpgen's out (F32, no step run, 2 ranks): every
// tensor's bytes unchanged, under the same names, the 4 q and k norms among them.
TEST(Qwen3ModelDirectory, WeightsRoundTripExactly) {
  const std::filesystem::path dir = e2e_dir("qwen3_reference_round_trip");
  const std::filesystem::path bin =
      build_binary(dir, reference_spec(kFixture, "qwen3.fsdp", kReferenceLayouts[1]));
  std::filesystem::remove(dir / "out.safetensors");
  const CmdResult r = run_binary(2, bin,
                                 fmt::format("--steps 0 --init-from {} --save out.safetensors",
                                             (kFixture / "model.safetensors").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto want = tensor_bytes(kFixture / "model.safetensors");
  const auto got = tensor_bytes(dir / "out.safetensors");
  EXPECT_EQ(want.size(), 24u);
  EXPECT_TRUE(want.contains("model.layers.1.self_attn.k_norm.weight"));
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_TRUE(got.at(name) == bytes) << name << " changed";
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Qwen3Reference, ::testing::ValuesIn(kReferenceLayouts),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace fsdpgen::test
