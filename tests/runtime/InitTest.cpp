// Initialization: independent of how a tensor is split into shard ranges,
// statistics of the Hugging Face GPT-2 rule, determinism by seed and name.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/init.h"

namespace {

std::vector<float> init(const std::string& name, int64_t n, uint64_t seed = 1234,
                        int64_t n_layer = 12) {
  std::vector<float> v(n);
  init_gpt2_range(v.data(), name, n_layer, seed, 0, n);
  return v;
}

struct moments {
  double mean = 0, std = 0;
};

moments moments_of(const std::vector<float>& v) {
  moments m;
  for (float x : v)
    m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (float x : v)
    m.std += (x - m.mean) * (x - m.mean);
  m.std = std::sqrt(m.std / static_cast<double>(v.size()));
  return m;
}

TEST(Init, ShardRangesConcatenateToTheWholeTensor) {
  const std::string name = "transformer.h.3.attn.c_attn.weight";
  const int64_t n = 300'007;  // above the threshold for threads, and not a round number
  const std::vector<float> whole = init(name, n);
  for (int64_t shards : {2, 3, 7}) {
    std::vector<float> joined(n);
    for (int64_t r = shards - 1; r >= 0; r--) {
      const int64_t begin = r * n / shards, end = (r + 1) * n / shards;
      init_gpt2_range(joined.data() + begin, name, 12, 1234, begin, end);
    }
    EXPECT_EQ(joined, whole) << shards << " shards";
  }
  float one;
  init_gpt2_range(&one, name, 12, 1234, 4321, 4322);
  EXPECT_EQ(one, whole[4321]);
}

TEST(Init, WeightsFollowTheGpt2Rule) {
  const int64_t n = 1 << 20;
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight",
                           "transformer.h.0.mlp.c_fc.weight"}) {
    moments m = moments_of(init(name, n));
    EXPECT_NEAR(m.mean, 0, 1e-4) << name;
    EXPECT_NEAR(m.std, 0.02, 2e-4) << name;
  }
  const double scaled = 0.02 / std::sqrt(2.0 * 12);
  for (const char* name :
       {"transformer.h.11.attn.c_proj.weight", "transformer.h.0.mlp.c_proj.weight"}) {
    moments m = moments_of(init(name, n));
    EXPECT_NEAR(m.mean, 0, 2e-5) << name;
    EXPECT_NEAR(m.std, scaled, scaled * 0.01) << name;
  }
  EXPECT_FLOAT_EQ(init_gpt2_rule("transformer.h.0.attn.c_proj.weight", 48).stddev,
                  static_cast<float>(0.02 / std::sqrt(96.0)));
}

TEST(Init, NormalValuesHaveGaussianTails) {
  const std::vector<float> v = init("transformer.h.1.attn.c_attn.weight", 1 << 20);
  int64_t beyond_2sigma = 0;
  for (float x : v)
    beyond_2sigma += std::fabs(x) > 0.04f;
  EXPECT_NEAR(static_cast<double>(beyond_2sigma) / static_cast<double>(v.size()), 0.0455, 0.002);
}

TEST(Init, BiasesAndNormsAreConstant) {
  for (const char* name : {"transformer.h.0.attn.c_attn.bias", "transformer.h.2.mlp.c_proj.bias",
                           "transformer.h.0.ln_1.bias", "transformer.ln_f.bias"})
    EXPECT_EQ(init(name, 1000), std::vector<float>(1000, 0.0f)) << name;
  for (const char* name :
       {"transformer.h.0.ln_1.weight", "transformer.h.5.ln_2.weight", "transformer.ln_f.weight",
        "model.layers.0.input_layernorm.weight", "model.norm.weight"})
    EXPECT_EQ(init(name, 1000), std::vector<float>(1000, 1.0f)) << name;
}

TEST(Init, DeterministicBySeedAndName) {
  const std::string name = "transformer.h.0.attn.c_attn.weight";
  EXPECT_EQ(init(name, 4096, 7), init(name, 4096, 7));
  EXPECT_NE(init(name, 4096, 7), init(name, 4096, 8));
  EXPECT_NE(init(name, 4096, 7), init("transformer.h.1.attn.c_attn.weight", 4096, 7));
  // Tensors of different names are uncorrelated.
  const std::vector<float> a = init("transformer.wte.weight", 1 << 16),
                           b = init("lm_head.weight", 1 << 16);
  double dot = 0;
  for (size_t i = 0; i < a.size(); i++)
    dot += static_cast<double>(a[i]) * b[i];
  EXPECT_LT(std::fabs(dot / (a.size() * 0.02 * 0.02)), 0.02);
}

TEST(Init, WeightDecayAppliesToMatricesAndEmbeddings) {
  EXPECT_TRUE(init_weight_decays("transformer.wte.weight"));
  EXPECT_TRUE(init_weight_decays("transformer.wpe.weight"));
  EXPECT_TRUE(init_weight_decays("transformer.h.0.attn.c_proj.weight"));
  EXPECT_TRUE(init_weight_decays("lm_head.weight"));
  EXPECT_FALSE(init_weight_decays("transformer.h.0.attn.c_attn.bias"));
  EXPECT_FALSE(init_weight_decays("transformer.h.0.ln_2.weight"));
  EXPECT_FALSE(init_weight_decays("transformer.ln_f.bias"));
}

TEST(Init, RejectsUnknownNamesAndRanges) {
  float x[4];
  EXPECT_THROW(init_gpt2_range(x, "transformer.h.0.attn.masked_bias_table", 12, 1, 0, 4),
               std::runtime_error);
  EXPECT_THROW(init_gpt2_range(x, "weight", 12, 1, 0, 4), std::runtime_error);
  EXPECT_THROW(init_gpt2_range(x, "lm_head.weight", 12, 1, 3, 2), std::runtime_error);
  EXPECT_THROW(init_gpt2_range(x, "transformer.h.0.mlp.c_proj.weight", 0, 1, 0, 4),
               std::runtime_error);
}

}  // namespace
