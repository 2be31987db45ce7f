// Tune: the spec `fsdpgen tune -o` writes trains as the spec as written does.
// tune changes only knobs that keep the model's math and the global batch
// (sharding, units, recompute, offload, micro-batch x accumulation, reduce,
// prefetch), so the tuned binary must reach the same losses and gradient
// norms step by step, within the equivalence tolerances that differ only in
// summation order (EquivalenceTest.cpp: fp32 gpt2 2.5e-6 loss and 4e-5 norm,
// llama 1e-5 and 2.5e-4, relative). The cases are chosen so that tune's
// winners differ among them: the first changes units, recompute and the
// micro-batch split; --keep pins those in the second, which then changes what
// remains; a llama spec; a spec with a custom layer; a hybrid spec at world
// 4. A case whose winner is the spec itself would show nothing, so every case
// asserts that tune changed it (--min-gain 0: -o takes any predicted gain).
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

struct tune_case {
  std::string name;
  E2eConfig config;
  std::string keep;  // --keep's knobs, or ""
};

std::vector<tune_case> tune_cases() {
  std::vector<tune_case> out;
  E2eConfig slow;  // recompute and two micro-batches: tune drops both on a CPU
  slow.recompute = "block";
  slow.micro_batches = 2;
  out.push_back({"regroups", slow, ""});
  out.push_back({"kept_units_recompute_batch", slow, "units recompute micro_batch"});
  E2eConfig llama = slow;
  llama.family = "llama";
  out.push_back({"llama", llama, ""});
  E2eConfig custom = slow;  // a custom layer's MLP (the layer reader's)
  custom.layers = example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)");
  out.push_back({"custom_layer", custom, ""});
  E2eConfig hybrid = slow;
  hybrid.sharding = "hybrid_shard";
  hybrid.world = 4;
  hybrid.shard_group = 2;
  out.push_back({"hybrid_w4", hybrid, ""});
  return out;
}

void PrintTo(const tune_case& t, std::ostream* os) {
  *os << t.name;
}

class TunedSpec : public ::testing::TestWithParam<tune_case> {};

// Lines of `a` that `b` does not have, joined: what tune rewrote.
std::string changed_lines(const std::string& a, const std::string& b) {
  std::istringstream in(a);
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (b.find(line + "\n") == std::string::npos) out += line + "\n";
  return out;
}

TEST_P(TunedSpec, TrainsWithTheSameLossesAsTheSpecAsWritten) {
  const tune_case& t = GetParam();
  const E2eConfig& c = t.config;
  if (!c.layers.empty()) FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("tune_" + t.name);
  std::ofstream(dir / "e2e.fsdp") << c.spec();
  CmdResult tuned = run_command(
      fmt::format("cd {} && {} tune e2e.fsdp --gpu cpu --min-gain 0 -o tuned.fsdp --top 3{}",
                  dir.string(), FSDPGEN_BIN, t.keep.empty() ? "" : " --keep " + t.keep));
  ASSERT_EQ(tuned.status, 0) << tuned.out;
  const std::string tuned_spec = file_bytes(dir / "tuned.fsdp");
  const std::string changed = changed_lines(tuned_spec, c.spec());
  std::printf("[ tuned    ] %s: changed\n%s", t.name.c_str(), changed.c_str());
  ASSERT_FALSE(changed.empty()) << "tune kept the spec as written, so this case shows nothing:\n"
                                << tuned.out;
  // What --keep pins stays as written: these lines of the spec are unchanged.
  if (!t.keep.empty()) {
    for (const char* line :
         {"  each block\n", "  recompute = block\n", "  micro_batch = 2\n", "micro_batches = 2"}) {
      EXPECT_NE(tuned_spec.find(line), std::string::npos) << line << " is kept:\n" << tuned_spec;
    }
  }

  CmdResult built =
      run_command(fmt::format("cd {} && {} e2e.fsdp -o train && {} tuned.fsdp -o tuned_train",
                              dir.string(), FSDPGEN_BIN, FSDPGEN_BIN));
  ASSERT_EQ(built.status, 0) << built.out;
  const std::vector<nlohmann::json> want = run_metrics(c, dir / "train", "written.jsonl");
  const std::vector<nlohmann::json> got = run_metrics(c, dir / "tuned_train", "tuned.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(got.size(), want.size());
  const bool llama = c.family == "llama";
  const double loss_tol = llama ? 1e-5 : 2.5e-6, norm_tol = llama ? 2.5e-4 : 4e-5;
  double worst_loss = 0, worst_norm = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    const double wl = want[s].at("loss").get<double>(), gl = got[s].at("loss").get<double>();
    const double wn = want[s].at("grad_norm").get<double>(),
                 gn = got[s].at("grad_norm").get<double>();
    worst_loss = std::max(worst_loss, std::abs(gl - wl) / std::abs(wl));
    worst_norm = std::max(worst_norm, std::abs(gn - wn) / std::abs(wn));
    EXPECT_LE(std::abs(gl - wl), loss_tol * std::abs(wl)) << "step " << s + 1 << " loss";
    EXPECT_LE(std::abs(gn - wn), norm_tol * std::abs(wn)) << "step " << s + 1 << " grad norm";
  }
  std::printf("[ measured ] %s: tuned vs written, relative loss %.2g, grad norm %.2g\n",
              t.name.c_str(), worst_loss, worst_norm);
}

INSTANTIATE_TEST_SUITE_P(Winners, TunedSpec, ::testing::ValuesIn(tune_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fsdpgen::test
