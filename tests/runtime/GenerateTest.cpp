// GenerateTest: the generator (runtime/generate/generator.h) against Hugging
// Face transformers on the same weights. tools/generate_reference.py (torch,
// transformers; not needed here) wrote tests/runtime/generate_reference/
// {gpt2,llama,qwen2,qwen3,mistral,olmo2,gemma,gemma3}: a small random GPT-2 (tied head), Llama
// (grouped-query attention, llama3 rope scaling, untied head), Qwen2 (Llama's
// block with q, k and v biases, tied head), Qwen3 (an RMSNorm on each
// head's q and k, heads of 16 where width / heads is 8, tied head) and
// Mistral (a sliding window of 5: the 6-token prompt and every later token
// attend only their last 5 positions), OLMo 2 (norms after attention and
// the MLP, q's and k's RMSNorms across all heads, untied head) and Gemma (the
// embedding scaled by sqrt(width), (1 + weight) RMSNorms, GeGLU, one kv head,
// heads of 16) and Gemma 3 (Gemma's with norms before and after each
// sub-block, each head's q/k norms, and local layers 0 and 2 attending their
// last 5 positions with their own rotary base, 1 and 3 global with linear
// rope scaling of factor 8, as in Gemma 3 4B and larger), saved
// with save_pretrained,
// and expected.json: a prompt, its prefill logits, the ids
// generate(do_sample=False) adds, and the whole sequence's logits from one
// uncached forward.
//
// Tolerances: fp32 on both sides, different GEMMs and summation orders:
// logits within 2e-5 absolute (measured at most 8.8e-6 here; logits are of order
// 1-10). Greedy ids must be equal: the reference's smallest gap between the
// two largest logits on the greedy path is 0.0097 (gpt2), 0.08 (llama), 0.05
// (qwen2), 0.056 (qwen3), 0.021 (mistral), 0.092 (olmo2), 0.0145 (gemma) and
// 0.324 (gemma3),
// far beyond those differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/files/hf_config.h"
#include "runtime/generate/generator.h"

namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(FSDPGEN_SOURCE_DIR) / "tests" / "runtime" / "generate_reference";
constexpr double kLogitTolerance = 2e-5;

struct reference {
  hf_model model;
  generate_weights weights;
  nlohmann::json expected;
  std::vector<int32_t> prompt, greedy;
};

reference load(const std::string& family) {
  reference r;
  std::vector<hf_problem> problems;
  r.model = hf_model_of_config((kFixture / family / "config.json").string(), &problems);
  EXPECT_TRUE(problems.empty()) << problems.front().key << ": " << problems.front().why;
  r.weights = generate_weights_read((kFixture / family).string());
  std::ifstream f(kFixture / family / "expected.json");
  std::stringstream text;
  text << f.rdbuf();
  r.expected = nlohmann::json::parse(text.str());
  r.prompt = r.expected.at("prompt").get<std::vector<int32_t>>();
  r.greedy = r.expected.at("greedy").get<std::vector<int32_t>>();
  return r;
}

// The largest absolute difference between got (rows x vocab) and the JSON rows.
double max_diff(const float* got, const nlohmann::json& rows, size_t first, size_t count,
                int64_t vocab) {
  double worst = 0;
  for (size_t i = 0; i < count; ++i)
    for (int64_t j = 0; j < vocab; ++j)
      worst = std::max(worst, std::fabs(got[i * vocab + j] - rows[first + i][j].get<double>()));
  return worst;
}

class Generate : public ::testing::TestWithParam<const char*> {};

TEST_P(Generate, PrefillLogitsMatchTransformers) {
  const reference r = load(GetParam());
  generator g(r.model, r.weights.view());
  std::vector<float> logits(r.prompt.size() * r.model.vocab);
  const float* last = g.forward(r.prompt, logits.data());
  const double diff =
      max_diff(logits.data(), r.expected.at("prefill_logits"), 0, r.prompt.size(), r.model.vocab);
  std::printf("%s: prefill logits within %.2e of transformers'\n", GetParam(), diff);
  EXPECT_LE(diff, kLogitTolerance);
  EXPECT_EQ(0, std::memcmp(last, logits.data() + (r.prompt.size() - 1) * r.model.vocab,
                           r.model.vocab * sizeof(float)))
      << "the last row's logits are the returned ones";
}

TEST_P(Generate, GreedyEqualsTransformersGenerate) {
  const reference r = load(GetParam());
  generator g(r.model, r.weights.view());
  sample_settings greedy;
  greedy.temperature = 0;
  EXPECT_EQ(g.generate(r.prompt, static_cast<int64_t>(r.greedy.size()), greedy), r.greedy);
}

// Each new token's logits, run one at a time against the cache, equal the
// transformers' uncached forward over the whole sequence, and equal this
// generator's own recomputation without a cache (the sequence so far
// prefilled from position 0).
TEST_P(Generate, CachedStepsEqualRecomputationWithoutCache) {
  const reference r = load(GetParam());
  std::vector<int32_t> ids = r.prompt;
  ids.insert(ids.end(), r.greedy.begin(), r.greedy.end());
  generator cached(r.model, r.weights.view()), fresh(r.model, r.weights.view());
  const float* logits = cached.forward(std::span(ids).first(r.prompt.size()));
  double worst_reference = 0, worst_fresh = 0;
  for (size_t t = r.prompt.size(); t < ids.size(); ++t) {
    logits = cached.forward(std::span(ids).subspan(t, 1));
    worst_reference = std::max(
        worst_reference, max_diff(logits, r.expected.at("sequence_logits"), t, 1, r.model.vocab));
    fresh.reset();
    const float* recomputed = fresh.forward(std::span(ids).first(t + 1));
    for (int64_t j = 0; j < r.model.vocab; ++j)
      worst_fresh =
          std::max(worst_fresh, static_cast<double>(std::fabs(logits[j] - recomputed[j])));
  }
  std::printf(
      "%s: cached steps within %.2e of transformers' uncached forward, %.2e of a "
      "recomputation without the cache\n",
      GetParam(), worst_reference, worst_fresh);
  EXPECT_EQ(cached.cached(), static_cast<int64_t>(ids.size()));
  EXPECT_LE(worst_reference, kLogitTolerance);
  EXPECT_LE(worst_fresh, 1e-5);
}

TEST_P(Generate, SeededSamplingIsReproducible) {
  const reference r = load(GetParam());
  generator g(r.model, r.weights.view());
  sample_settings s;
  s.temperature = 1.0;
  s.top_k = 20;
  s.top_p = 0.95;
  s.seed = 7;
  const std::vector<int32_t> a = g.generate(r.prompt, 20, s), b = g.generate(r.prompt, 20, s);
  s.seed = 8;
  const std::vector<int32_t> c = g.generate(r.prompt, 20, s);
  EXPECT_EQ(a, b) << "the same seed draws the same tokens";
  EXPECT_NE(a, c) << "another seed draws others";
  EXPECT_EQ(a.size(), 20u);
}

// top_k 1 and a tiny top_p keep only the most likely token: greedy, whatever the seed.
TEST_P(Generate, TopKOneAndTinyTopPAreGreedy) {
  const reference r = load(GetParam());
  generator g(r.model, r.weights.view());
  sample_settings s;
  s.temperature = 2.0;
  s.top_k = 1;
  EXPECT_EQ(g.generate(r.prompt, 20, s), r.greedy);
  s.top_k = 0;
  s.top_p = 1e-6;
  s.seed = 99;
  EXPECT_EQ(g.generate(r.prompt, 20, s), r.greedy);
}

// With top_k 3, every draw is one of the 3 most likely tokens.
TEST_P(Generate, TopKDrawsOnlyAmongTheKMostLikely) {
  const reference r = load(GetParam());
  generator g(r.model, r.weights.view());
  sample_settings s;
  s.temperature = 5.0;  // flat: without the cut, others would be drawn
  s.top_k = 3;
  std::mt19937_64 rng(3);
  const float* logits = g.forward(r.prompt);
  std::vector<float> sorted(logits, logits + r.model.vocab);
  std::sort(sorted.rbegin(), sorted.rend());
  std::set<int32_t> seen;
  for (int i = 0; i < 200; ++i) {
    const int32_t id = g.pick(logits, s, rng);
    EXPECT_GE(logits[id], sorted[2]);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 3u) << "a flat distribution over 3 draws each of them in 200 draws";
}

INSTANTIATE_TEST_SUITE_P(Families, Generate,
                         ::testing::Values("gpt2", "llama", "qwen2", "qwen3", "mistral", "olmo2",
                                           "gemma", "gemma3"),
                         [](const auto& info) { return std::string(info.param); });

TEST(GenerateErrors, MissingOrMisshapedTensorsAndBadIdsAreNamed) {
  const reference r = load("llama");
  generate_tensors t = r.weights.view();
  t.erase("model.layers.1.mlp.up_proj.weight");
  try {
    generator g(r.model, t);
    FAIL() << "a missing tensor was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the weights lack model.layers.1.mlp.up_proj.weight (shape [64, 32])");
  }
  t = r.weights.view();
  t["model.norm.weight"].shape = {31};
  try {
    generator g(r.model, t);
    FAIL() << "a misshapen tensor was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "the weights' model.norm.weight is [31], the model's is [32]");
  }
  generator g(r.model, r.weights.view());
  const std::vector<int32_t> bad = {1, 96};
  EXPECT_THROW(g.forward(bad), std::invalid_argument);
  const std::vector<int32_t> long_prompt(65, 1);
  EXPECT_THROW(g.generate(long_prompt, 1, {}), std::invalid_argument);
}

// The largest absolute difference of two equal-length vectors.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  return worst;
}

// The model with Gemma 2's soft-caps and query scale (hf_model's fields).
hf_model with_caps(hf_model m, double attention, double logit, double query_scalar) {
  m.attention_softcap = attention;
  m.logit_softcap = logit;
  m.query_pre_attn_scalar = query_scalar;
  return m;
}

// Gemma 2's final_logit_softcapping: every prefill row's
// logits and a decode step's are X tanh(l / X) of the uncapped ones.
TEST(GenerateCaps, LogitSoftcapCapsPrefillAndDecodeLogits) {
  const reference r = load("llama");
  const int64_t V = r.model.vocab, n = static_cast<int64_t>(r.prompt.size());
  const double X = 1.5;
  generator plain(r.model, r.weights.view()), capped(with_caps(r.model, 0, X, 0), r.weights.view());
  std::vector<float> want(n * V), got(n * V);
  plain.forward(r.prompt, want.data());
  const float* last = capped.forward(r.prompt, got.data());
  double worst = 0;
  for (int64_t j = 0; j < n * V; ++j)
    worst = std::max(worst, std::fabs(got[j] - X * std::tanh(want[j] / X)));
  EXPECT_LE(worst, 1e-6) << "prefill";
  EXPECT_EQ(0, std::memcmp(last, got.data() + (n - 1) * V, V * sizeof(float)));
  const float* step_plain = plain.forward(std::span(r.greedy).first(1));
  const std::vector<float> uncapped(step_plain, step_plain + V);
  const float* step = capped.forward(std::span(r.greedy).first(1));
  worst = 0;
  for (int64_t j = 0; j < V; ++j)
    worst = std::max(worst, std::fabs(step[j] - X * std::tanh(uncapped[j] / X)));
  EXPECT_LE(worst, 1e-6) << "decode";
}

// query_pre_attn_scalar S scales q . k by S^-0.5: S = 4 x the head size is
// the head size's scale with q's weights halved; S = the head size is none.
TEST(GenerateCaps, QueryPreAttnScalarScalesTheScores) {
  const reference r = load("llama");
  const int64_t V = r.model.vocab, n = static_cast<int64_t>(r.prompt.size());
  const double head_size = 8;
  ASSERT_EQ(r.model.head_dim, 8);
  generate_weights halved = r.weights;
  for (auto& [name, values] : halved.data)
    if (name.find("q_proj.weight") != std::string::npos)
      for (float& v : values)
        v *= 0.5f;
  generator scaled(with_caps(r.model, 0, 0, 4 * head_size), r.weights.view());
  generator same(with_caps(r.model, 0, 0, head_size), r.weights.view());
  generator plain(r.model, r.weights.view()), by_weights(r.model, halved.view());
  std::vector<float> got(n * V), want(n * V), same_logits(n * V), plain_logits(n * V);
  scaled.forward(r.prompt, got.data());
  by_weights.forward(r.prompt, want.data());
  same.forward(r.prompt, same_logits.data());
  plain.forward(r.prompt, plain_logits.data());
  EXPECT_LE(max_abs_diff(got, want), 1e-6);
  EXPECT_EQ(same_logits, plain_logits);
  EXPECT_GT(max_abs_diff(got, plain_logits), 1e-3) << "the scale changes the logits";
}

// Gemma 2's attn_logit_softcapping: a cap far above the scores is none (to
// 1e-5); a cap of 0.5 changes the logits, and its cached decode steps equal a
// recomputation without the cache (the cap in both paths).
TEST(GenerateCaps, AttentionSoftcapAppliesInPrefillAndDecode) {
  const reference r = load("llama");
  const int64_t V = r.model.vocab, n = static_cast<int64_t>(r.prompt.size());
  generator plain(r.model, r.weights.view()),
      loose(with_caps(r.model, 1e4, 0, 0), r.weights.view());
  std::vector<float> plain_logits(n * V), loose_logits(n * V);
  plain.forward(r.prompt, plain_logits.data());
  loose.forward(r.prompt, loose_logits.data());
  EXPECT_LE(max_abs_diff(loose_logits, plain_logits), 1e-5);
  generator cached(with_caps(r.model, 0.5, 0, 0), r.weights.view());
  generator fresh(with_caps(r.model, 0.5, 0, 0), r.weights.view());
  std::vector<int32_t> ids = r.prompt;
  ids.insert(ids.end(), r.greedy.begin(), r.greedy.end());
  std::vector<float> capped_logits(n * V);
  cached.forward(std::span(ids).first(r.prompt.size()), capped_logits.data());
  EXPECT_GT(max_abs_diff(capped_logits, plain_logits), 1e-3) << "a cap of 0.5 changes the logits";
  double worst = 0;
  for (size_t t = r.prompt.size(); t < ids.size(); ++t) {
    const float* step = cached.forward(std::span(ids).subspan(t, 1));
    const std::vector<float> logits(step, step + V);
    fresh.reset();
    const float* recomputed = fresh.forward(std::span(ids).first(t + 1));
    for (int64_t j = 0; j < V; ++j)
      worst = std::max(worst, static_cast<double>(std::fabs(logits[j] - recomputed[j])));
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(GenerateErrors, SampleSettingsProblems) {
  EXPECT_EQ(sample_settings_problem({}), "");
  EXPECT_EQ(sample_settings_problem({-1, 0, 1, 0}),
            "temperature -1 is not a number >= 0 (0: greedy)");
  EXPECT_EQ(sample_settings_problem({1, -2, 1, 0}), "top-k -2 is negative (0: every token)");
  EXPECT_EQ(sample_settings_problem({1, 0, 0, 0}), "top-p 0 is outside (0, 1] (1: every token)");
  EXPECT_EQ(sample_settings_problem({1, 0, 1.5, 0}),
            "top-p 1.5 is outside (0, 1] (1: every token)");
}

}  // namespace
