// MuonReferenceTest: optimizer = muon(...) trains as torch.optim.Muon (with
// torch.optim.AdamW on the rest) does. tools/muon_train_reference.py (torch,
// transformers; not needed here) wrote muon_expected.json and
// muon_bf16_expected.json beside the GPT-2 and llama reference fixtures: each
// step's loss, learning rate and gradient norm of 6 steps from the fixture's
// model.safetensors on its tokens.bin, with Muon on the blocks' linear
// weights. The fixture's spec, with its optimizer replaced by the same
// muon(...), is trained as written (one rank), full_shard over 2 and 4
// ranks (each matrix's owner gathers it from the shards that hold it),
// shard_grad_op and no_shard over 2, hybrid_shard and hybrid_shard_zero2
// over 2x2, and with 2 micro-batches accumulated.
//
// GPT-2 runs nesterov momentum, the 'original' lr rule (its Conv1D weights
// read as nn.Linear's (out, in)), Muon weight decay and a warm-up and cosine
// schedule; llama plain momentum and 'match_rms_adamw'.
//
// Tolerances. fp32 Newton-Schulz against torch's in float64: measured at most
// 1.5e-7 relative in the loss and 1.6e-7 in the norm over the 6 steps, both
// models and 3 layouts; 1e-6 in both (6x; the issue asks 1e-5). bf16
// Newton-Schulz against torch as shipped: the same bf16 roundings, but fp32
// GEMMs that accumulate in another order send a few iterates to the
// neighbouring bf16 value; measured at most 3.8e-5 in the loss and 3.2e-4
// in the norm; 2e-4 and 2e-3. Each of these failed the fp32 tolerance, by
// the step and relative error shown (mutations of runtime/muon_layout.cpp
// and muon_step.cpp, tried once): 'original' and 'match_rms_adamw' swapped
// (gpt2 2.8e-3 in the loss at step 2, llama 3.1e-4 at step 2), GPT-2's
// Conv1D weights read as (out, in) (gpt2 5.0e-4, step 2), nesterov flipped
// (gpt2 9.3e-4, llama 2.3e-4, step 3), the nested AdamW's lr not following
// the schedule (gpt2 3.5e-2, step 2).
#include "tests/e2e/ReferenceLayouts.h"

namespace fsdpgen::test {
namespace {

const std::filesystem::path kE2e = std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests" / "e2e";

struct muon_case {
  const char* name;
  const char* fixture;
  const char* spec;
  const char* adamw_line;  // the fixture spec's optimizer line
  const char* muon_line;
};
// The runs of tools/muon_train_reference.py's RUNS.
constexpr muon_case kMuonGpt2 = {
    "gpt2", "gpt2_reference", "gpt2.fsdp",
    "optimizer   = adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)",
    "optimizer   = muon(lr = 0.02, momentum = 0.95, nesterov = true, ns_steps = 5,\n"
    "                   weight_decay = 0.01, adjust_lr = original,\n"
    "                   adamw = adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, "
    "weight_decay = 0.1))"};
constexpr muon_case kMuonLlama = {
    "llama", "llama_reference", "llama.fsdp",
    "optimizer   = adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)",
    "optimizer   = muon(lr = 0.01, momentum = 0.9, nesterov = false, ns_steps = 5,\n"
    "                   weight_decay = 0, adjust_lr = match_rms_adamw,\n"
    "                   adamw = adamw(lr = 1e-2, betas = (0.9, 0.95), eps = 1e-8, "
    "weight_decay = 0.1))"};

struct muon_run {
  muon_case model;
  bool bf16;  // ns_dtype = bf16, against torch as shipped
  reference_layout layout;
};

void PrintTo(const muon_run& r, std::ostream* os) {
  *os << r.model.name << (r.bf16 ? "_bf16_" : "_") << r.layout.name;
}

std::string muon_spec(const muon_run& r) {
  const std::filesystem::path fixture = kE2e / r.model.fixture;
  std::string s = reference_spec(fixture, r.model.spec, r.layout);
  std::string muon = r.model.muon_line;
  if (r.bf16) muon.replace(muon.find("ns_steps = 5"), 12, "ns_steps = 5, ns_dtype = bf16");
  const size_t at = s.find(r.model.adamw_line);
  EXPECT_NE(at, std::string::npos) << r.model.adamw_line;
  if (at != std::string::npos) s.replace(at, std::string(r.model.adamw_line).size(), muon);
  return s;
}

class MuonReference : public ::testing::TestWithParam<muon_run> {};

TEST_P(MuonReference, StepsMatchTorch) {
  const muon_run& r = GetParam();
  const std::filesystem::path fixture = kE2e / r.model.fixture;
  const nlohmann::json expected = nlohmann::json::parse(
      file_bytes(fixture / (r.bf16 ? "muon_bf16_expected.json" : "muon_expected.json")));
  const std::vector<double> losses = expected.at("losses"), lrs = expected.at("lrs"),
                            norms = expected.at("grad_norms");
  const double loss_tolerance = r.bf16 ? 2e-4 : 1e-6, norm_tolerance = r.bf16 ? 2e-3 : 1e-6;
  std::ostringstream name;
  PrintTo(r, &name);
  const std::filesystem::path dir = e2e_dir("muon_reference_" + name.str());
  const std::filesystem::path bin = build_binary(dir, muon_spec(r));
  const CmdResult run = run_binary(r.layout.world, bin,
                                   fmt::format("--metrics metrics.jsonl --init-from {}",
                                               (fixture / "model.safetensors").string()));
  ASSERT_EQ(run.status, 0) << run.out;
  const std::vector<nlohmann::json> got = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(got.size(), losses.size()) << run.out;
  for (size_t s = 0; s < got.size(); ++s) {
    const double loss = got[s].at("loss").get<double>(), lr = got[s].at("lr").get<double>(),
                 norm = got[s].at("grad_norm").get<double>();
    std::printf(
        "step %zu: loss %.9f, torch %.9f (%.2e); lr %.9g; grad_norm %.9f, torch %.9f "
        "(%.2e)\n",
        s + 1, loss, losses[s], relative(loss, losses[s]), lr, norm, norms[s],
        relative(norm, norms[s]));
    EXPECT_LE(relative(loss, losses[s]), loss_tolerance) << "step " << s + 1 << " loss";
    EXPECT_LE(relative(lr, lrs[s]), 1e-8) << "step " << s + 1 << " lr";
    EXPECT_LE(relative(norm, norms[s]), norm_tolerance) << "step " << s + 1 << " grad_norm";
  }
  EXPECT_LT(got.back().at("loss").get<double>(), 0.9 * got.front().at("loss").get<double>())
      << "the loss should fall";
}

// Every other strategy, and micro-batches accumulated, each with the
// fixture's global batch of 4: the owners' gathers and scatters (shard
// groups of 2 and 4), the whole matrices read in place (no_shard).
constexpr reference_layout kMoreLayouts[] = {
    {"no_shard_w2", 2, "world     = 2\n  sharding  = no_shard", 2},
    {"shard_grad_op_w2", 2, "world     = 2\n  sharding  = shard_grad_op", 2},
    {"full_shard_w4", 4, "world     = 4\n  sharding  = full_shard", 1},
    {"hybrid_zero2_w4", 4, "world     = 4\n  sharding  = hybrid_shard_zero2\n  shard_group = 2", 1},
    {"full_shard_w2_accumulate", 2,
     "world     = 2\n  sharding  = full_shard\n  accumulate { micro_batches = 2  reduce = last }",
     1},
};

std::vector<muon_run> muon_runs() {
  std::vector<muon_run> out;
  for (const muon_case& m : {kMuonGpt2, kMuonLlama}) {
    for (const reference_layout& l : kReferenceLayouts)
      out.push_back({m, false, l});
    for (const reference_layout& l : kMoreLayouts)
      out.push_back({m, false, l});
    out.push_back({m, true, kReferenceLayouts[0]});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Runs, MuonReference, ::testing::ValuesIn(muon_runs()),
                         [](const auto& info) {
                           std::ostringstream os;
                           PrintTo(info.param, &os);
                           return os.str();
                         });

}  // namespace
}  // namespace fsdpgen::test
