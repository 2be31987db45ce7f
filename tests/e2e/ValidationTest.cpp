// Validation: the loss a training binary reports on held-out data (the
// plan's validation pass: the step's gathers and micro-batch 0's forward,
// no gradients) is the mean cross-entropy of the weights it holds, computed
// here again in double from the weights it saved; it is the same at every
// strategy, accumulation and world size; it runs at val_every, at
// checkpoints and at the end; and validation data that cannot serve is
// refused on every rank.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/E2e.h"
#include "tests/runtime/Reference.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

constexpr int kT = 16, kC = 32, kH = 2, kF = 128, kV = 64, kLayers = 3;

// Validation over 7 sequences: not a multiple of any world x micro-batch
// below, so the last pass counts only some of its rows.
E2eConfig validated(int world = 2) {
  E2eConfig c;
  c.world = world;
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 2\n  val_sequences = 7\n";
  return c;
}

// Every F32 tensor of a safetensors file, by name.
std::map<std::string, ref::vec> read_f32_tensors(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, ref::vec> out;
  const nlohmann::json tensors = nlohmann::json::parse(header);
  for (const auto& [name, t] : tensors.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t.at("dtype"), "F32") << name;
    const size_t begin = t.at("data_offsets")[0], end = t.at("data_offsets")[1];
    std::vector<float> f((end - begin) / 4);
    std::memcpy(f.data(), data.data() + begin, end - begin);
    out[name] = ref::vec(f.begin(), f.end());
  }
  return out;
}

// The mean per-token loss of the saved GPT-2 over the first `count` windows
// of `tokens` (window j: tokens [jT, jT + T + 1)), in double.
double reference_val_loss(const fs::path& weights, const std::vector<int32_t>& tokens, int count) {
  std::map<std::string, ref::vec> w = read_f32_tensors(weights);
  const ref::dims d{1, kT, kC, kH, kF, kV};
  double sum = 0;
  for (int j = 0; j < count; ++j) {
    const std::vector<int32_t> in(tokens.begin() + j * kT, tokens.begin() + j * kT + kT);
    const std::vector<int32_t> target(tokens.begin() + j * kT + 1,
                                      tokens.begin() + j * kT + kT + 1);
    ref::vec x =
        ref::encoder(in, w["transformer.wte.weight"], w["transformer.wpe.weight"], 1, kT, kC);
    for (int l = 0; l < kLayers; ++l) {
      ref::block_params p;
      for (const ref::named_tensor& t : ref::block_tensors())
        p.*t.member = w[fmt::format("transformer.h.{}.{}", l, t.name)];
      x = ref::block(x, p, d);
    }
    sum += ref::head_loss(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"],
                          w["transformer.wte.weight"], target, d);
  }
  return sum / (count * kT);
}

// The "val loss" lines of a run's log, by step.
std::map<int, double> val_losses(const std::string& log) {
  std::map<int, double> out;
  static const std::regex line(R"(step +(\d+)/\d+ \| val loss ([0-9.]+) \| (\d+) sequences)");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
    out[std::stoi((*it)[1])] = std::stod((*it)[2]);
  return out;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

// The validation loss after training is the weights' own: the loss of the
// saved weights on the same sequences, computed here in double, within fp32
// rounding (relative 1e-6; measured 1.6e-9).
TEST(Validation, EqualsAnIndependentForwardOfTheSavedWeights) {
  const fs::path dir = e2e_dir("validation_reference");
  const E2eConfig c = validated();
  const fs::path bin = build_binary(dir, c.spec());
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(12 * kT + 1);
  for (int32_t& t : tokens)
    t = static_cast<int32_t>(rng() % kV);
  write_token_file(dir / "val.bin", tokens);
  CmdResult r =
      run_binary(c.world, bin, "--steps 4 --val val.bin --metrics m.jsonl --save w.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("val: tokens"), std::string::npos) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("val_loss"));
  ASSERT_TRUE(m[1].contains("val_loss")) << m[1];
  EXPECT_FALSE(m[2].contains("val_loss"));
  ASSERT_TRUE(m[3].contains("val_loss")) << m[3];
  const double got = m[3]["val_loss"].get<double>();
  const double want = reference_val_loss(dir / "w.safetensors", tokens, 7);
  std::printf("validation loss: binary %.9g, double reference %.9g, relative %.2g\n", got, want,
              relative(got, want));
  EXPECT_LT(relative(got, want), 1e-6) << "binary " << got << ", reference " << want;
  // Two steps earlier the weights differed, and so did the loss.
  EXPECT_GT(relative(m[1]["val_loss"].get<double>(), want), 1e-4);
  // The log says the same.
  EXPECT_NEAR(val_losses(r.out).at(4), got, 1e-6) << r.out;
}

// The same weights give the same validation loss at every strategy,
// accumulation, recompute, offload and world size (fp32, relative 1e-6): a
// run with no step to train evaluates the weights it was given.
TEST(Validation, SameAtEveryStrategyAndWorldSize) {
  const E2eConfig base = validated(1);
  const fs::path first = shared_binary(e2e_dir("validation_strategies_w1"), base.spec());
  ASSERT_EQ(run_binary(1, first, "--steps 3 --save w.safetensors").status, 0);
  const fs::path weights = first.parent_path() / "w.safetensors";
  std::vector<E2eConfig> configs;
  for (const char* sharding : {"full_shard", "shard_grad_op", "no_shard"}) {
    E2eConfig c = validated(2);
    c.sharding = sharding;
    configs.push_back(c);
  }
  E2eConfig hybrid = validated(4);
  hybrid.sharding = "hybrid_shard";
  hybrid.shard_group = 2;
  configs.push_back(hybrid);
  E2eConfig accumulate = validated(2);
  accumulate.micro_batches = 2;
  accumulate.micro_batch = 3;
  accumulate.recompute = "block";
  configs.push_back(accumulate);
  E2eConfig offload = validated(2);
  offload.offload = "cpu";
  configs.push_back(offload);
  E2eConfig offload_acts = validated(2);  // the pass copies saved inputs to the host too
  offload_acts.recompute = "block";
  offload_acts.offload_activations = true;
  configs.push_back(offload_acts);
  configs.push_back(base);
  double want = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const E2eConfig& c = configs[i];
    const fs::path bin = shared_binary(e2e_dir("validation_" + c.name()), c.spec());
    CmdResult r = run_binary(c.world, bin, "--steps 0 --init-from " + weights.string());
    ASSERT_EQ(r.status, 0) << c.name() << "\n" << r.out;
    const std::map<int, double> v = val_losses(r.out);
    ASSERT_EQ(v.size(), 1u) << c.name() << "\n" << r.out;
    if (i == 0) want = v.begin()->second;
    std::printf("%s: val loss %.6f\n", c.name().c_str(), v.begin()->second);
    EXPECT_LT(relative(v.begin()->second, want), 1e-6) << c.name() << "\n" << r.out;
  }
}

// Validation runs every val_every steps, at every checkpoint and at the end,
// and --val-every 0 turns it off; the summary gives the last.
TEST(Validation, RunsAtItsStepsCheckpointsAndTheEnd) {
  const fs::path dir = e2e_dir("validation_when");
  E2eConfig c = validated();
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 3\n  val_sequences = 5\n";
  const fs::path bin = shared_binary(dir, c.spec());
  CmdResult r = run_binary(c.world, bin,
                           "--steps 7 --checkpoint-every 5 --checkpoint-dir ck --metrics m.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<int> steps;
  for (const auto& [step, loss] : val_losses(r.out))
    steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int>{3, 5, 6, 7})) << r.out;
  EXPECT_NE(r.out.find("| val loss "), std::string::npos) << r.out;
  std::vector<int> with_val;
  for (const nlohmann::json& m : read_metrics(dir / "m.jsonl"))
    if (m.contains("val_loss")) with_val.push_back(m["step"].get<int>());
  EXPECT_EQ(with_val, steps);
  CmdResult off = run_binary(c.world, bin, "--steps 3 --val-every 0");
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_TRUE(val_losses(off.out).empty()) << off.out;
}

// A validation set shorter than val_sequences is read whole, with a note
// (its mean loss over all 3 sequences: 3 sequences of one token repeated);
// --val-every where the spec names no validation data is refused before
// the first step, on every rank.
TEST(Validation, AShortValidationSetIsReadWholeAndMissingDataRefused) {
  const fs::path dir = e2e_dir("validation_refused");
  const E2eConfig c = validated();
  const fs::path bin = shared_binary(dir, c.spec());
  write_token_file(dir / "short.bin", std::vector<int32_t>(3 * kT + 1, 5));
  CmdResult r = run_binary(c.world, bin, "--steps 2 --val short.bin");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("note: val: tokens short.bin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": fewer than the 7 sequences of val_sequences; each validation reads all "
                       "3\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 3 sequences in"), std::string::npos) << r.out;
  E2eConfig plain;
  const fs::path plain_bin = shared_binary(e2e_dir("validation_refused_plain"), plain.spec());
  CmdResult no_val = run_binary(2, plain_bin, "--steps 2 --val-every 5");
  EXPECT_NE(no_val.status, 0) << no_val.out;
  EXPECT_NE(no_val.out.find("--val-every 5: the spec names no validation data"), std::string::npos)
      << no_val.out;
}

}  // namespace
}  // namespace fsdpgen::test
