// EvalReferenceTest: multiple-choice evaluation (runtime/train/eval.h, --eval)
// scores llm.c's HellaSwag-format file as Hugging Face transformers does on
// the same weights. tools/eval_reference.py (torch, transformers; not needed
// here) wrote tests/e2e/eval_reference: a hand-made file of 8 examples over
// the GPT-2 reference model's 64 ids (two to five endings, a candidate of the
// whole context) and expected.json, every candidate's loss sum and acc,
// acc_norm by llm.c's rules. The binary is the GPT-2 reference's spec, loaded
// with --init-from its model.safetensors and run for 0 steps (the offline
// evaluation of a checkpoint or weights file), at one rank (4 candidates a
// pass) and two (full_shard, 2 a pass, the examples split).
//
// Tolerances: fp32 on both sides, a sum of at most 15 per-token losses
// (about 4.2 each); measured at most 1.2e-6 apart at both worlds, 1e-5
// allowed (8x); the reference's candidates lie at least 1e-3 apart, so acc
// and acc_norm must be equal. Made to fail: the sum started one position
// late (every sum off by about 4), no evaluation at the run's end (step 5's
// metrics line), the magic unchecked (the token file refused for another
// reason).
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kGpt2 =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "gpt2_reference";
const std::filesystem::path kFixture =
    std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e" / "eval_reference";
constexpr double kLossSumTolerance = 1e-5;

// Each example's line of --eval-scores.
std::vector<nlohmann::json> read_scores(const std::filesystem::path& path) {
  return read_metrics(path);  // one JSON object a line, as a metrics file
}

class EvalReference : public ::testing::TestWithParam<reference_layout> {};

TEST_P(EvalReference, ScoresMatchTransformers) {
  const reference_layout& l = GetParam();
  const nlohmann::json expected = nlohmann::json::parse(file_bytes(kFixture / "expected.json"));
  const std::filesystem::path dir = e2e_dir(std::string("eval_reference_") + l.name);
  const std::filesystem::path bin = shared_binary(dir, reference_spec(kGpt2, "gpt2.fsdp", l));
  std::filesystem::remove(dir / "scores.jsonl");
  const CmdResult r =
      run_binary(l.world, bin,
                 fmt::format("--steps 0 --init-from {} --eval {} --eval-scores scores.jsonl",
                             (kGpt2 / "model.safetensors").string(),
                             (kFixture / "hellaswag_tiny.bin").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> got = read_scores(dir / "scores.jsonl");
  const nlohmann::json& sums = expected.at("loss_sums");
  ASSERT_EQ(got.size(), sums.size()) << r.out;
  int64_t correct = 0, correct_norm = 0;
  double worst = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const std::vector<double> mine = got[e].at("loss_sums"), theirs = sums[e];
    ASSERT_EQ(mine.size(), theirs.size()) << "example " << e;
    for (size_t j = 0; j < mine.size(); ++j) {
      worst = std::max(worst, std::abs(mine[j] - theirs[j]));
      EXPECT_NEAR(mine[j], theirs[j], kLossSumTolerance) << "example " << e << " completion " << j;
    }
    correct += got[e].at("pred") == got[e].at("label");
    correct_norm += got[e].at("pred_norm") == got[e].at("label");
  }
  const double n = static_cast<double>(got.size());
  std::printf("%zu examples: worst loss sum %.2e from transformers'; acc %.4f acc_norm %.4f\n",
              got.size(), worst, correct / n, correct_norm / n);
  EXPECT_EQ(correct / n, expected.at("acc").get<double>());
  EXPECT_EQ(correct_norm / n, expected.at("acc_norm").get<double>());
  EXPECT_NE(r.out.find(fmt::format("hellaswag acc {:.4f} acc_norm {:.4f} (8 examples)",
                                   expected.at("acc").get<double>(),
                                   expected.at("acc_norm").get<double>())),
            std::string::npos)
      << r.out;
}

INSTANTIATE_TEST_SUITE_P(Layouts, EvalReference,
                         ::testing::Values(kReferenceLayouts[0], kReferenceLayouts[1]),
                         [](const auto& info) { return std::string(info.param.name); });

// The spec's eval keys score every eval_every steps in the loop: the log
// line after the step's, and the step's --metrics line carries the scores;
// --eval-examples overrides the spec's count.
TEST(EvalLoop, EveryEvalEveryStepsAndAtTheEnd) {
  std::string spec = reference_spec(kGpt2, "gpt2.fsdp", kReferenceLayouts[0]);
  const std::string log_every = "  log_every   = 1\n";
  ASSERT_NE(spec.find(log_every), std::string::npos);
  spec.replace(spec.find(log_every), log_every.size(),
               fmt::format("{}  eval = \"{}\"\n  eval_every = 2\n  eval_examples = 5\n", log_every,
                           (kFixture / "hellaswag_tiny.bin").string()));
  const std::filesystem::path dir = e2e_dir("eval_in_the_loop");
  const std::filesystem::path bin = shared_binary(dir, spec);
  const CmdResult r = run_binary(1, bin,
                                 fmt::format("--steps 5 --metrics metrics.jsonl --init-from {}",
                                             (kGpt2 / "model.safetensors").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(m.size(), 5u) << r.out;
  for (size_t s = 0; s < m.size(); ++s) {
    const bool due = (s + 1) % 2 == 0 || s + 1 == 5;  // every 2 steps and at the end
    EXPECT_EQ(m[s].contains("eval_acc"), due) << "step " << s + 1 << ": " << m[s].dump();
    if (!due) continue;
    EXPECT_EQ(m[s].at("eval_examples").get<int64_t>(), 5);
    for (const char* key : {"eval_acc", "eval_acc_norm"}) {
      const double v = m[s].at(key).get<double>();
      EXPECT_TRUE(v >= 0 && v <= 1 && std::abs(v * 5 - std::round(v * 5)) < 1e-9) << key << v;
    }
    EXPECT_NE(r.out.find(fmt::format("step {}/5 | hellaswag acc {:.4f} acc_norm {:.4f} (5 "
                                     "examples) in ",
                                     s + 1, m[s].at("eval_acc").get<double>(),
                                     m[s].at("eval_acc_norm").get<double>())),
              std::string::npos)
        << r.out;
  }
  const CmdResult flag = run_binary(1, bin,
                                    fmt::format("--steps 0 --eval-examples 3 --init-from {}",
                                                (kGpt2 / "model.safetensors").string()));
  ASSERT_EQ(flag.status, 0) << flag.out;
  EXPECT_NE(flag.out.find("(3 examples)"), std::string::npos) << flag.out;
}

// A file that is not an evaluation file (here the training tokens) stops
// every rank before any step, naming the file and what it holds.
TEST(EvalLoop, ATokenFileIsRefusedAtStart) {
  const std::filesystem::path dir = e2e_dir("eval_reference_full_shard_w2");
  const std::filesystem::path bin =
      shared_binary(dir, reference_spec(kGpt2, "gpt2.fsdp", kReferenceLayouts[1]));
  const CmdResult r = run_binary(2, bin, fmt::format("--eval {}", (kGpt2 / "tokens.bin").string()));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--eval: " + (kGpt2 / "tokens.bin").string() +
                       ": not an evaluation file: magic 20240520 at byte 0"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
