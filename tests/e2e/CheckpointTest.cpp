// Checkpoint: saving and resuming training end to end. A run cut at step K,
// checkpointed and resumed to step N gives every step's loss and the final
// weights bit for bit as the uninterrupted N steps (fp32, bf16 hybrid with
// micro-batches, fp16 with a skipped step before the cut, SGD with momentum);
// a checkpoint resumes on another world size and wrap policy; old and partial
// checkpoints are removed; every kind of bad checkpoint, and a save that
// cannot be written, stops every rank with an error that names the problem,
// and a failed save leaves the earlier checkpoints as they were.
#include <algorithm>
#include <tuple>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

// A binary of this spec shared by the tests (and their processes) that ask
// for `name`; every test writes its files into a work directory of its own.
fs::path binary(const std::string& name, const std::string& spec) {
  return shared_binary(e2e_dir("checkpoint_bin_" + name), spec);
}

// A test's own work directory, emptied.
fs::path work(const std::string& name) {
  fs::path d = fs::path(FSDPGEN_E2E_WORK) / ("checkpoint_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// The names in dir, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool has(const CmdResult& r, const std::string& part) {
  return r.out.find(part) != std::string::npos;
}

// Runs `world` ranks; the test fails unless the run succeeds.
CmdResult train(int world, const fs::path& bin, const std::string& args) {
  CmdResult r = run_binary(world, bin, args);
  EXPECT_EQ(r.status, 0) << r.out;
  return r;
}

// Runs `world` (> 1) ranks, each to its own end, and appends each rank's exit
// status as "rank R exit S": mpirun is told not to stop the others when one
// fails, which would hide a rank that hangs or does not see the error. env:
// variables set for the ranks.
CmdResult run_every_rank(int world, const fs::path& bin, const std::string& args,
                         const std::string& env = "") {
  allow_mpi_as_root();
  return run_command(
      fmt::format("cd {} && {} OMPI_MCA_orte_abort_on_non_zero_status=0 timeout 120 mpirun -n {} "
                  "--oversubscribe --bind-to none sh -c '{} {}; echo \"rank "
                  "$OMPI_COMM_WORLD_RANK exit $?\"'",
                  bin.parent_path().string(), env, world, bin.string(), args));
}

// Every rank stopped by itself with exit status 1: none hung (timeout's 124),
// crashed or was killed.
void expect_every_rank_failed(const CmdResult& r, int world) {
  EXPECT_NE(r.status, 124) << "timed out: a rank hung\n" << r.out;
  for (int rank = 0; rank < world; ++rank)
    EXPECT_TRUE(has(r, fmt::format("rank {} exit 1\n", rank))) << r.out;
}

// Runs `world` ranks, which must each fail with every part in their output.
void expect_fails(int world, const fs::path& bin, const std::string& args,
                  const std::vector<std::string>& parts) {
  CmdResult r = run_every_rank(world, bin, args);
  expect_every_rank_failed(r, world);
  for (const std::string& p : parts)
    EXPECT_TRUE(has(r, p)) << args << "\nmissing: " << p << "\n" << r.out;
}

nlohmann::json manifest_of(const fs::path& checkpoint) {
  return nlohmann::json::parse(file_bytes(checkpoint / "manifest.json"));
}

// Trains c.steps steps straight, and the first `cut` with a checkpoint at the
// end and then the rest resumed from it: the metrics of every step (loss, norm,
// lr, loss scale, skipped) and the weights saved at the end are identical.
// Returns the work directory (straight.jsonl, ck/step_K, ...).
fs::path expect_resume_bit_exact(const std::string& name, const E2eConfig& c, int cut,
                                 const std::string& args = "") {
  const fs::path bin = binary(name, c.spec());
  const fs::path w = work(name);
  const std::string ck = (w / "ck").string();
  train(c.world, bin,
        fmt::format("{} --metrics {} --save {}", args, (w / "straight.jsonl").string(),
                    (w / "straight.safetensors").string()));
  // The whole run, checkpointed at the cut (--steps cut would be a shorter
  // run, its lr schedule ending at the cut).
  CmdResult first =
      train(c.world, bin,
            fmt::format(
                "{} --checkpoint-every {} --checkpoint-keep 1000 --checkpoint-dir {} --metrics {}",
                args, cut, ck, (w / "first.jsonl").string()));
  const std::string step_dir = fmt::format("{}/step_{:08}", ck, cut);
  EXPECT_TRUE(has(first, fmt::format("checkpoint: step {} written to {}", cut, step_dir)))
      << first.out;
  CmdResult resumed =
      train(c.world, bin,
            fmt::format("{} --resume {} --metrics {} --save {}", args, step_dir,
                        (w / "resumed.jsonl").string(), (w / "resumed.safetensors").string()));
  EXPECT_TRUE(has(resumed, fmt::format("weights: resumed from {} (step {}", step_dir, cut)))
      << resumed.out;

  const std::vector<nlohmann::json> straight = read_metrics(w / "straight.jsonl");
  std::vector<nlohmann::json> cut_run = read_metrics(w / "first.jsonl");
  const std::vector<nlohmann::json> rest = read_metrics(w / "resumed.jsonl");
  EXPECT_EQ(straight.size(), static_cast<size_t>(c.steps));
  EXPECT_EQ(cut_run.size(), static_cast<size_t>(c.steps));
  cut_run.resize(std::min(cut_run.size(), static_cast<size_t>(cut)));
  EXPECT_EQ(rest.size(), static_cast<size_t>(c.steps - cut));
  cut_run.insert(cut_run.end(), rest.begin(), rest.end());
  EXPECT_EQ(cut_run.size(), straight.size());
  for (size_t s = 0; s < std::min(straight.size(), cut_run.size()); ++s) {
    std::printf("step %zu: loss %.9g straight, %.9g %s\n", s + 1,
                straight[s].at("loss").get<double>(), cut_run[s].at("loss").get<double>(),
                s < static_cast<size_t>(cut) ? "before the checkpoint" : "resumed");
    EXPECT_EQ(cut_run[s].at("step"), s + 1);
    for (const char* key : {"loss", "grad_norm", "lr", "loss_scale", "skipped"})
      EXPECT_EQ(cut_run[s].at(key), straight[s].at(key)) << key << " of step " << s + 1;
  }
  const std::string a = file_bytes(w / "straight.safetensors"),
                    b = file_bytes(w / "resumed.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == b) << "the final weights differ";
  return w;
}

E2eConfig steps(E2eConfig c, int n) {
  c.steps = n;
  return c;
}

TEST(Checkpoint, ResumeIsBitExactFp32FullShard) {
  const fs::path w = expect_resume_bit_exact("fp32", steps(E2eConfig{}, 5), 2);
  const nlohmann::json m = manifest_of(w / "ck" / "step_00000002");
  EXPECT_EQ(m.at("step"), 2);
  EXPECT_EQ(m.at("sequences"), 8);  // 2 ranks x 2 sequences x 2 steps
  EXPECT_EQ(m.at("world"), 2);
  EXPECT_EQ(m.at("shard_group"), 2);
  EXPECT_EQ(m.at("optimizer"), "adamw");
  EXPECT_EQ(m.at("applied_steps"), 2);
  EXPECT_EQ(m.at("loss_scale").at("enabled"), false);
  EXPECT_EQ(names_in(w / "ck" / "step_00000002"),
            (std::vector<std::string>{"manifest.json", "shard_00000.bin", "shard_00001.bin"}));
}

TEST(Checkpoint, ResumeIsBitExactBf16HybridWithMicroBatches) {
  E2eConfig c = steps(E2eConfig{}, 4);
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batches = 2;
  c.param = c.reduce_dtype = "bf16";
  const fs::path w = expect_resume_bit_exact("bf16_hybrid", c, 2);
  const nlohmann::json m = manifest_of(w / "ck" / "step_00000002");
  EXPECT_EQ(m.at("world"), 4);
  EXPECT_EQ(m.at("shard_group"), 2);
  EXPECT_EQ(m.at("sequences"), 32);  // 4 ranks x 2 micro-batches x 2 sequences x 2 steps
  // One copy of each shard: the first replica writes.
  EXPECT_EQ(names_in(w / "ck" / "step_00000002"),
            (std::vector<std::string>{"manifest.json", "shard_00000.bin", "shard_00001.bin"}));
}

// The step before the cut overflows: the checkpoint carries the halved loss
// scale and an AdamW step count one behind the step (bias correction).
TEST(Checkpoint, ResumeIsBitExactFp16WithASkippedStepBeforeTheCut) {
  E2eConfig c = steps(E2eConfig{}, 5);
  c.param = c.reduce_dtype = "fp16";
  const fs::path w = expect_resume_bit_exact("fp16", c, 3, "--inject-overflow 1");
  const std::vector<nlohmann::json> straight = read_metrics(w / "straight.jsonl");
  const std::vector<nlohmann::json> rest = read_metrics(w / "resumed.jsonl");
  ASSERT_EQ(straight.size(), 5u);
  for (size_t s = 0; s < straight.size(); ++s) {
    EXPECT_EQ(straight[s].at("skipped"), s == 1) << "step " << s + 1;
    EXPECT_EQ(straight[s].at("loss_scale"), s <= 1 ? 65536.0 : 32768.0) << "step " << s + 1;
  }
  ASSERT_EQ(rest.size(), 2u);
  for (const nlohmann::json& m : rest)
    EXPECT_EQ(m.at("loss_scale"), 32768.0) << "the resumed run's loss scale";
  const nlohmann::json m = manifest_of(w / "ck" / "step_00000003");
  EXPECT_EQ(m.at("step"), 3);
  EXPECT_EQ(m.at("applied_steps"), 2);
  EXPECT_EQ(m.at("loss_scale").at("enabled"), true);
  EXPECT_EQ(m.at("loss_scale").at("scale"), 32768.0);
  EXPECT_EQ(m.at("loss_scale").at("finite_steps"), 1);
}

// llama (grouped-query attention, rotary tables rebuilt at start, untied head).
TEST(Checkpoint, ResumeIsBitExactLlama) {
  E2eConfig c = steps(E2eConfig{}, 4);
  c.family = "llama";
  c.tied = false;
  expect_resume_bit_exact("llama", c, 2);
}

// A custom layer's tensors are checkpointed and resumed like any others.
TEST(Checkpoint, ResumeIsBitExactWithACustomLayer) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c = steps(E2eConfig{}, 4);
  c.layers = example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)");
  c.recompute = "block";
  expect_resume_bit_exact("custom_layer", c, 2);
}

TEST(Checkpoint, ResumeIsBitExactSgdWithMomentum) {
  E2eConfig c = steps(E2eConfig{}, 5);
  c.sharding = "shard_grad_op";
  c.optimizer = "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)";
  const fs::path w = expect_resume_bit_exact("sgd", c, 2);
  const nlohmann::json m = manifest_of(w / "ck" / "step_00000002");
  EXPECT_EQ(m.at("optimizer"), "sgd");
  for (const nlohmann::json& u : m.at("units"))
    EXPECT_EQ(u.at("state_planes"), 1) << "a momentum buffer per unit";
}

// Each of `others` (a name and a binary's config) resumed from ck's step 2
// of a 5-step run: steps 3 to 5 lose at most 1e-5 (relative) against the
// uninterrupted run's losses `want`.
void expect_resumed_like_straight(const fs::path& w, const std::string& ck,
                                  const std::vector<double>& want,
                                  const std::vector<std::pair<std::string, E2eConfig>>& others) {
  for (const auto& [name, c] : others) {
    const fs::path other = binary(name, c.spec());
    const fs::path metrics = w / (name + ".jsonl");
    CmdResult r =
        train(c.world, other,
              fmt::format("--resume {}/step_00000002 --metrics {}", ck, metrics.string()));
    EXPECT_TRUE(has(r, "(step 2, 8 sequences read)")) << r.out;
    const std::vector<double> got = read_losses(metrics);
    ASSERT_EQ(got.size(), 3u) << name;
    for (size_t s = 0; s < got.size(); ++s) {
      const double rel = std::abs(got[s] - want[s + 2]) / std::abs(want[s + 2]);
      std::printf("%s step %zu: loss %.9f, uninterrupted %.9f, relative difference %.2e\n",
                  name.c_str(), s + 3, got[s], want[s + 2], rel);
      EXPECT_LE(rel, 1e-5) << name << " step " << s + 3;
    }
  }
}

// optimizer = muon(...): the AdamW state of a shard's other elements and
// each matrix's momentum, which its owner keeps, go into the checkpoint's
// two planes at the matrices' places and come back to the owners: a resumed
// run is the straight run, bit for bit. Full_shard over 2 ranks, written at
// once (--checkpoint-every); llama hybrid 2x2 with 2 micro-batches, written
// behind the steps (the spec's checkpoint plans the staging buffer).
constexpr const char* kMuon =
    "muon(lr = 0.02, momentum = 0.95, weight_decay = 0.01, adamw = adamw(lr = 1e-2))";

TEST(Checkpoint, ResumeIsBitExactMuon) {
  E2eConfig c = steps(E2eConfig{}, 5);
  c.optimizer = kMuon;
  const fs::path w = expect_resume_bit_exact("muon", c, 2);
  const nlohmann::json m = manifest_of(w / "ck" / "step_00000002");
  EXPECT_EQ(m.at("optimizer"), "muon");
  for (const nlohmann::json& u : m.at("units"))
    EXPECT_EQ(u.at("state_planes"), 2) << "AdamW's m (with Muon's momentum) and v";
}

TEST(Checkpoint, ResumeIsBitExactMuonLlamaHybridWrittenBehind) {
  E2eConfig c = steps(E2eConfig{}, 5);
  c.family = "llama";
  c.tied = false;
  c.optimizer = kMuon;
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batch = 1;
  c.micro_batches = 2;
  c.train_extra = "  checkpoint(every = 100, dir = \"unused\")\n";
  expect_resume_bit_exact("muon_llama_hybrid", c, 3);
}

// A Muon checkpoint written by 2 ranks (each matrix's momentum with its
// owner) resumed on 1 rank (one owner for all) and on 4 with two blocks a
// unit (other owners, other slices): the same losses as the uninterrupted
// run within 1e-5 (fp32: only the order of summation differs).
TEST(Checkpoint, MuonResumesOnAnotherWorldSize) {
  E2eConfig two = steps(E2eConfig{}, 5);
  two.optimizer = kMuon;
  const fs::path bin = binary("muon_w2", two.spec());
  const fs::path w = work("muon_reshard");
  const std::string ck = (w / "ck").string();
  train(2, bin, fmt::format("--metrics {}", (w / "straight.jsonl").string()));
  train(2, bin, fmt::format("--checkpoint-every 2 --checkpoint-keep 10 --checkpoint-dir {}", ck));
  const std::vector<double> want = read_losses(w / "straight.jsonl");
  ASSERT_EQ(want.size(), 5u);
  E2eConfig four = two;
  four.world = 4;
  four.micro_batch = 1;
  four.units = "group 2 blocks";
  E2eConfig one = two;
  one.sharding = "no_shard";
  one.world = 1;
  one.micro_batch = 4;
  expect_resumed_like_straight(w, ck, want, {{"muon_w4_group2", four}, {"muon_w1", one}});
}

// Written by 2 ranks with a unit per block, resumed by binaries of the same
// model for 4 ranks with two blocks per unit, for one rank, and for 2 ranks
// with each linear layer its own unit (tensors split across units): the same
// global batch, so the same losses as the uninterrupted run (fp32: only the
// order of summation differs).
TEST(Checkpoint, ResumesOnAnotherWorldSizeAndWrapPolicy) {
  const E2eConfig two = steps(E2eConfig{}, 5);
  const fs::path bin = binary("fp32", two.spec());
  const fs::path w = work("reshard");
  const std::string ck = (w / "ck").string();
  train(2, bin, fmt::format("--metrics {}", (w / "straight.jsonl").string()));
  train(2, bin, fmt::format("--checkpoint-every 2 --checkpoint-keep 10 --checkpoint-dir {}", ck));
  const std::vector<double> want = read_losses(w / "straight.jsonl");
  ASSERT_EQ(want.size(), 5u);

  E2eConfig four = two;
  four.world = 4;
  four.micro_batch = 1;
  four.units = "group 2 blocks";
  E2eConfig one = two;
  one.sharding = "no_shard";
  one.world = 1;
  one.micro_batch = 4;
  E2eConfig linear = two;  // block units to per-linear units (sub-block), with recompute
  linear.units = "each linear";
  linear.recompute = "block";
  expect_resumed_like_straight(w, ck, want,
                               {{"w4_group2", four}, {"w1", one}, {"w2_each_linear", linear}});
}

// Shuffled token files (20 windows in 2 files: step 6 of 4 sequences begins
// the second epoch, in its own order): a run cut at step 3 and resumed reads
// the same sequences, bit for bit, through the epoch boundary; resumed on one
// rank (and on 4 with other units) from a 2-rank checkpoint, and on two from
// a one-rank checkpoint, the same losses as the uninterrupted run within 1e-6
// (fp32: only the order of summation differs; measured below 1e-8, where
// reading the sequences in another order moves a step's loss by 2e-4 to 2e-2).
TEST(Checkpoint, ShuffledTokenFilesResumeExactlyAndOnAnotherWorldSize) {
  const fs::path data = work("token_files");
  const std::vector<int32_t> tokens = random_token_ids(20 * 16 + 1, 64, 21);
  write_token_file(data / "part_0.bin", {tokens.begin(), tokens.begin() + 150});
  write_token_file(data / "part_1.bin", {tokens.begin() + 150, tokens.end()});
  const std::string args = fmt::format("--data '{}/part_*.bin' --shuffle true", data.string());
  const E2eConfig two = steps(E2eConfig{}, 7);
  const fs::path w = expect_resume_bit_exact("tokens", two, 3, args);
  const std::vector<double> want = read_losses(w / "straight.jsonl");
  ASSERT_EQ(want.size(), 7u);
  E2eConfig one = two;
  one.sharding = "no_shard";
  one.world = 1;
  one.micro_batch = 4;
  E2eConfig four = two;
  four.world = 4;
  four.micro_batch = 1;
  four.units = "group 2 blocks";
  for (const auto& [name, c] : {std::pair{"w1", one}, std::pair{"w4_group2", four}}) {
    const fs::path metrics = w / fmt::format("{}.jsonl", name);
    CmdResult r = train(c.world, binary(fmt::format("tokens_{}", name), c.spec()),
                        fmt::format("{} --resume {}/ck/step_00000003 --metrics {}", args,
                                    w.string(), metrics.string()));
    EXPECT_TRUE(has(r, "(step 3, 12 sequences read)")) << r.out;
    const std::vector<double> got = read_losses(metrics);
    ASSERT_EQ(got.size(), 4u) << name;
    for (size_t s = 0; s < got.size(); ++s) {
      const double rel = std::abs(got[s] - want[s + 3]) / std::abs(want[s + 3]);
      std::printf("%s step %zu: loss %.9f, uninterrupted %.9f, relative difference %.2e\n", name,
                  s + 4, got[s], want[s + 3], rel);
      EXPECT_LE(rel, 1e-6) << name << " step " << s + 4;
    }
  }
  // The other way: a one-rank run checkpointed at step 3 and resumed on two
  // ranks reads what the uninterrupted one-rank run read.
  const fs::path one_bin = binary("tokens_w1", one.spec());
  train(1, one_bin, fmt::format("{} --metrics {}", args, (w / "one_straight.jsonl").string()));
  train(1, one_bin,
        fmt::format("{} --checkpoint-every 3 --checkpoint-keep 10 --checkpoint-dir {}", args,
                    (w / "ck1").string()));
  CmdResult r = train(2, binary("tokens", two.spec()),
                      fmt::format("{} --resume {}/ck1/step_00000003 --metrics {}", args, w.string(),
                                  (w / "w2_from_w1.jsonl").string()));
  EXPECT_TRUE(has(r, "(step 3, 12 sequences read)")) << r.out;
  const std::vector<double> one_want = read_losses(w / "one_straight.jsonl");
  const std::vector<double> got = read_losses(w / "w2_from_w1.jsonl");
  ASSERT_EQ(one_want.size(), 7u);
  ASSERT_EQ(got.size(), 4u);
  for (size_t s = 0; s < got.size(); ++s) {
    const double rel = std::abs(got[s] - one_want[s + 3]) / std::abs(one_want[s + 3]);
    std::printf("w2 from w1 step %zu: loss %.9f, uninterrupted %.9f, relative difference %.2e\n",
                s + 4, got[s], one_want[s + 3], rel);
    EXPECT_LE(rel, 1e-6) << "step " << s + 4;
  }
}

// checkpoint(every = 1, keep = 2) in the spec: after 5 steps only steps 4 and
// 5 remain, and a stale partial directory is removed by the first save; it is
// never what --resume picks.
TEST(Checkpoint, KeepsTheNewestAndIgnoresAndRemovesPartialOnes) {
  E2eConfig c = steps(E2eConfig{}, 5);
  std::string spec = c.spec();
  const std::string log = "  log_every = 1\n";
  spec.replace(spec.find(log), log.size(),
               log + "  checkpoint(every = 1, dir = \"ck\", keep = 2)\n");
  const fs::path bin = binary("keep", spec);
  const fs::path ck = bin.parent_path() / "ck";
  fs::remove_all(ck);

  train(2, bin, "--steps 1");
  ASSERT_TRUE(fs::exists(ck / "step_00000001" / "manifest.json"));
  // A complete-looking checkpoint of a later step, left partial by a crash.
  const fs::path stale = ck / "step_00000009.partial";
  fs::create_directories(stale);
  fs::copy(ck / "step_00000001", stale);
  nlohmann::json m = manifest_of(stale);
  m["step"] = 9;
  m["applied_steps"] = 9;
  write_file(stale / "manifest.json", m.dump(1));

  // --resume without a value: the newest complete checkpoint in the spec's dir.
  CmdResult r = train(2, bin, "--steps 2 --checkpoint-every 0 --resume");
  EXPECT_TRUE(has(r, "weights: resumed from ck/step_00000001 (step 1, 4 sequences read)")) << r.out;
  EXPECT_TRUE(has(r, "step 2/2 | loss")) << r.out;
  fs::remove_all(ck / "step_00000001");
  expect_fails(2, bin, "--steps 2 --resume", {"ck: no complete checkpoint in it"});

  CmdResult full = train(2, bin, "");
  EXPECT_TRUE(has(full, "checkpoints: every 1 steps and at the end, in ck (newest 2 kept)"))
      << full.out;
  EXPECT_TRUE(has(full, "checkpoint: step 3 written to ck/step_00000003")) << full.out;
  EXPECT_TRUE(has(full, "1 older removed")) << full.out;
  EXPECT_EQ(names_in(ck), (std::vector<std::string>{"step_00000004", "step_00000005"}));
}

// Resuming at or past the run's last step trains nothing; the weights saved
// then are the checkpoint's, bit for bit those the checkpointing run saved.
TEST(Checkpoint, ResumingAtOrPastTheLastStepTrainsNothing) {
  const fs::path bin = binary("fp32", steps(E2eConfig{}, 5).spec());
  const fs::path w = work("at_end");
  const std::string ck = (w / "ck").string();
  train(2, bin,
        fmt::format("--steps 2 --checkpoint-every 2 --checkpoint-dir {} --save {}", ck,
                    (w / "trained.safetensors").string()));
  for (int n : {2, 1}) {
    const fs::path metrics = w / fmt::format("m{}.jsonl", n);
    const fs::path saved = w / fmt::format("resumed{}.safetensors", n);
    // Checkpointing on: there is no step to write one after.
    CmdResult r = train(2, bin,
                        fmt::format("--steps {} --resume {} --checkpoint-every 1 "
                                    "--checkpoint-dir {} --metrics {} --save {}",
                                    n, ck, ck, metrics.string(), saved.string()));
    EXPECT_TRUE(has(r, fmt::format("the checkpoint is at step 2 and the run has {} steps: nothing "
                                   "to train",
                                   n)))
        << r.out;
    EXPECT_FALSE(has(r, "| loss ")) << r.out;
    EXPECT_FALSE(has(r, "checkpoint: step")) << r.out;
    EXPECT_EQ(names_in(ck), std::vector<std::string>{"step_00000002"});
    EXPECT_TRUE(fs::exists(metrics));
    EXPECT_TRUE(read_metrics(metrics).empty());
    EXPECT_EQ(safetensors_tensor_bytes(saved), safetensors_tensor_bytes(w / "trained.safetensors"));
    EXPECT_FALSE(safetensors_tensor_bytes(saved).empty());
  }
}

// Copies checkpoint `from` to dir, for a test to damage.
fs::path copy_of(const fs::path& from, const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy(from, dir);
  return dir;
}

// A good checkpoint of the shared fp32 binary at step 2, in w/good.
fs::path good_checkpoint(const fs::path& bin, const fs::path& w) {
  train(2, bin,
        fmt::format("--steps 2 --checkpoint-every 2 --checkpoint-dir {}", (w / "good").string()));
  return w / "good" / "step_00000002";
}

std::string resume(const fs::path& p) {
  return fmt::format("--resume {}", p.string());
}

TEST(Checkpoint, DamagedCheckpointsAreErrorsNamingTheFile) {
  const fs::path bin = binary("fp32", steps(E2eConfig{}, 5).spec());
  const fs::path w = work("damaged");
  const fs::path good = good_checkpoint(bin, w);
  ASSERT_TRUE(fs::exists(good / "manifest.json"));

  // Rank 1 reads shard 1 and finds the error; rank 0 stops with it.
  const fs::path flipped = copy_of(good, w / "flipped");
  std::string bytes = file_bytes(flipped / "shard_00001.bin");
  ASSERT_GT(bytes.size(), 16u);
  bytes[10] = static_cast<char>(bytes[10] ^ 0x01);
  write_file(flipped / "shard_00001.bin", bytes);
  CmdResult r = run_every_rank(2, bin, resume(flipped));
  expect_every_rank_failed(r, 2);
  EXPECT_TRUE(
      has(r, "rank 1: error: " + (flipped / "shard_00001.bin").string() + ": weights of unit"))
      << r.out;
  EXPECT_TRUE(has(r, "fails its checksum")) << r.out;
  EXPECT_TRUE(has(r, "rank 0: error: resuming from a checkpoint failed on another rank")) << r.out;

  const fs::path truncated = copy_of(good, w / "truncated");
  fs::resize_file(truncated / "shard_00000.bin", fs::file_size(truncated / "shard_00000.bin") / 2);
  expect_fails(2, bin, resume(truncated),
               {(truncated / "shard_00000.bin").string(), "(truncated or replaced?)"});

  const fs::path missing = copy_of(good, w / "missing");
  fs::remove(missing / "shard_00001.bin");
  expect_fails(2, bin, resume(missing),
               {"shard 1: \"file\" " + (missing / "shard_00001.bin").string() +
                ": No such file or directory"});

  const fs::path not_json = copy_of(good, w / "not_json");
  write_file(not_json / "manifest.json", "step 2, trust me\n");
  expect_fails(2, bin, resume(not_json),
               {(not_json / "manifest.json").string() + ": not valid JSON"});
}

TEST(Checkpoint, CheckpointsOfAnotherRunAreErrorsNamingTheDifference) {
  const E2eConfig c = steps(E2eConfig{}, 5);
  const fs::path bin = binary("fp32", c.spec());
  const fs::path w = work("mismatch");

  fs::create_directories(w / "empty");
  expect_fails(2, bin, resume(w / "empty"),
               {(w / "empty").string() + ": no complete checkpoint in it"});

  // Another model: the same tensors, twice as wide.
  std::string wide = c.spec();
  wide.replace(wide.find("width = 32"), 10, "width = 64");
  train(2, binary("wide", wide),
        fmt::format("--steps 1 --checkpoint-every 1 --checkpoint-dir {}", (w / "wide").string()));
  expect_fails(2, bin, resume(w / "wide"),
               {"step_00000001: tensor transformer.wte.weight has shape [64, 64], this model's is "
                "[64, 32]"});

  // Another optimizer: SGD's momentum for AdamW's moments.
  E2eConfig sgd = c;
  sgd.sharding = "shard_grad_op";
  sgd.optimizer = "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)";
  train(2, binary("sgd", sgd.spec()),
        fmt::format("--steps 1 --checkpoint-every 1 --checkpoint-dir {}", (w / "sgd").string()));
  expect_fails(2, bin, resume(w / "sgd"),
               {"written with optimizer sgd, this binary uses adamw", "fsdpgen merge"});

  // A command-line error, before any rank starts.
  CmdResult both = run_command(fmt::format("timeout 60 {} --resume {} --init-from w.safetensors",
                                           bin.string(), (w / "sgd").string()));
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_TRUE(has(both, "--init-from excludes --resume") ||
              has(both, "--resume excludes --init-from"))
      << both.out;
  CmdResult seeded = run_command(
      fmt::format("timeout 60 {} --resume {} --seed 3", bin.string(), (w / "sgd").string()));
  EXPECT_EQ(seeded.status, 2) << seeded.out;
  EXPECT_TRUE(has(seeded, "--seed excludes --resume") || has(seeded, "--resume excludes --seed"))
      << seeded.out;
}

// A checkpoint directory that cannot be made stops every rank before the
// first step, each naming the flag (a save that fails later: below).
TEST(Checkpoint, AnUnwritableCheckpointDirStopsTheRunBeforeTheFirstStep) {
  const fs::path bin = binary("fp32", steps(E2eConfig{}, 5).spec());
  const fs::path w = work("unwritable");
  write_file(w / "file", "a regular file\n");
  const fs::path ck = w / "file" / "ck";
  CmdResult r = run_every_rank(
      2, bin, fmt::format("--steps 2 --checkpoint-every 1 --checkpoint-dir {}", ck.string()));
  expect_every_rank_failed(r, 2);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_TRUE(has(r, fmt::format("rank {}: error: --checkpoint-dir {}: cannot create the "
                                   "directory {}: Not a directory",
                                   rank, ck.string(), ck.string())))
        << r.out;
  EXPECT_FALSE(has(r, "step 1/2")) << "nothing is trained that could not be saved\n" << r.out;
}

// Saves at steps 1, 2 and 3 with keep 1; the save of step 2 fails (a shard
// file on rank 1, or the final rename on rank 0): every rank stops with an
// error, no partial directory is left, and step 1's checkpoint is kept and
// still resumes.
TEST(Checkpoint, AFailedSaveKeepsTheEarlierCheckpoints) {
  const fs::path bin = binary("fp32", steps(E2eConfig{}, 5).spec());
  const fs::path w = work("failed_save");
  const fs::path lib = failing_io_library(w);
  ASSERT_TRUE(fs::exists(lib));
  // The rank that failed prints its error, and rank 0 says it stopped for it
  // (the binary prints an error shared by every rank once).
  struct failure {
    std::string name, env;
    std::vector<std::string> errors;
  };
  const std::vector<failure> failures = {
      {"shard",
       "FSDPGEN_TEST_FAIL_OPEN=step_00000002.partial/shard_00001.bin",
       {"rank 1: error: cannot create {ck}/step_00000002.partial/shard_00001.bin: Input/output "
        "error",
        "rank 0: error: saving a checkpoint failed on another rank (see its message)"}},
      {"rename",
       "FSDPGEN_TEST_FAIL_RENAME=step_00000002",
       {"rank 0: error: cannot rename {ck}/step_00000002.partial to {ck}/step_00000002: Invalid "
        "cross-device link"}},
  };
  for (const failure& f : failures) {
    const fs::path ck = w / ("ck_" + f.name);
    const fs::path metrics = w / (f.name + ".jsonl");
    CmdResult r = run_every_rank(
        2, bin,
        fmt::format("--steps 3 --checkpoint-every 1 --checkpoint-keep 1 --checkpoint-dir {} "
                    "--metrics {}",
                    ck.string(), metrics.string()),
        fmt::format("{} LD_PRELOAD={}", f.env, lib.string()));
    expect_every_rank_failed(r, 2);
    for (std::string error : f.errors) {
      for (size_t at; (at = error.find("{ck}")) != std::string::npos;)
        error.replace(at, 4, ck.string());
      EXPECT_TRUE(has(r, error)) << "missing: " << error << "\n" << r.out;
    }
    EXPECT_TRUE(has(r, "checkpoint: step 1 written")) << r.out;
    EXPECT_FALSE(has(r, "step 3/3")) << "training stops at the failed save\n" << r.out;
    ASSERT_TRUE(fs::exists(ck));
    EXPECT_EQ(names_in(ck), std::vector<std::string>{"step_00000001"}) << f.name;

    // What the failed run trained in step 2, trained again from step 1.
    const std::vector<double> failed = read_losses(metrics);
    const fs::path again = w / (f.name + "_resumed.jsonl");
    CmdResult resumed = train(
        2, bin, fmt::format("--steps 2 --resume {} --metrics {}", ck.string(), again.string()));
    EXPECT_TRUE(has(resumed, "(step 1, 4 sequences read)")) << resumed.out;
    const std::vector<double> redone = read_losses(again);
    ASSERT_EQ(failed.size(), 2u) << f.name;
    ASSERT_EQ(redone.size(), 1u) << f.name;
    EXPECT_EQ(redone[0], failed[1]) << f.name;
  }
}

// Saving a step again over its complete checkpoint (a run restarted from
// scratch into the same directory): the older one is moved aside and put
// back when the new one cannot be renamed into place, so it is never lost.
TEST(Checkpoint, AFailedResaveKeepsTheCheckpointItWouldReplace) {
  const fs::path bin = binary("fp32", steps(E2eConfig{}, 5).spec());
  const fs::path w = work("failed_resave");
  const fs::path lib = failing_io_library(w);
  ASSERT_TRUE(fs::exists(lib));
  const fs::path ck = w / "ck";
  fs::remove_all(ck);
  const std::string args =
      fmt::format("--steps 2 --checkpoint-every 1 --checkpoint-dir {} --metrics {}", ck.string(),
                  (w / "first.jsonl").string());
  CmdResult first = train(2, bin, args);
  ASSERT_EQ(first.status, 0) << first.out;
  const std::string manifest = file_bytes(ck / "step_00000002" / "manifest.json");
  ASSERT_FALSE(manifest.empty());

  CmdResult again = run_every_rank(
      2, bin, args,
      fmt::format("FSDPGEN_TEST_FAIL_RENAME_END=/step_00000002 LD_PRELOAD={}", lib.string()));
  expect_every_rank_failed(again, 2);
  EXPECT_TRUE(has(again, "checkpoint: step 1 written")) << "step 1 was replaced\n" << again.out;
  EXPECT_TRUE(has(again, "cannot rename")) << again.out;
  EXPECT_EQ(names_in(ck), (std::vector<std::string>{"step_00000001", "step_00000002"}));
  EXPECT_EQ(file_bytes(ck / "step_00000002" / "manifest.json"), manifest);

  CmdResult resumed =
      train(2, bin, fmt::format("--steps 3 --resume {} --checkpoint-every 0", ck.string()));
  EXPECT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_TRUE(has(resumed, "(step 2, 8 sequences read)")) << resumed.out;
}

// A run launched with its own flags (--steps, token data, validation,
// checkpoints, --save, --metrics) and resumed with a plain --resume is the
// same run: the same lr schedule, data and validation, its metrics file
// continued (the checkpoint's steps kept, later ones trained again), its
// --save written, bit for bit as the uninterrupted run. A flag given then
// overrides the record with a warning naming the effect; a checkpoint
// written before runs were recorded resumes with this run's flags.
TEST(Checkpoint, APlainResumeIsTheRunAsLaunched) {
  const fs::path w = work("as_launched");
  const std::vector<int32_t> tokens = random_token_ids(40 * 16 + 1, 64, 5);
  write_token_file(w / "train.bin", tokens);
  write_token_file(w / "val.bin", random_token_ids(8 * 16 + 1, 64, 6));
  const fs::path bin = binary("as_launched", steps(E2eConfig{}, 4).spec());
  const std::string launched = fmt::format(
      "--steps 6 --data {0}/train.bin --val {0}/val.bin --val-every 2 --val-sequences 8 "
      "--checkpoint-every 3 --checkpoint-keep 5 --checkpoint-dir {0}/ck --save {0}/s.safetensors "
      "--metrics {0}/m.jsonl",
      w.string());
  train(2, bin, launched);
  fs::copy_file(w / "m.jsonl", w / "straight.jsonl");
  fs::rename(w / "s.safetensors", w / "straight.safetensors");

  const std::string ck3 = (w / "ck" / "step_00000003").string();
  CmdResult resumed = train(2, bin, "--resume " + ck3);
  EXPECT_TRUE(has(resumed, "resume: the run as launched, from the checkpoint: " +
                               launched.substr(0, launched.find(" --checkpoint-every")) +
                               " --checkpoint-every 3 --checkpoint-dir " + (w / "ck").string()))
      << resumed.out;
  EXPECT_TRUE(has(resumed, fmt::format("metrics: {}/m.jsonl keeps its lines of steps 1-3; 3 of "
                                       "later steps, trained again now, dropped",
                                       w.string())))
      << resumed.out;
  EXPECT_FALSE(has(resumed, "warning:")) << resumed.out;
  const std::vector<nlohmann::json> want = read_metrics(w / "straight.jsonl");
  const std::vector<nlohmann::json> got = read_metrics(w / "m.jsonl");
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), 6u);
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(got[s].at("step"), s + 1);
    for (const char* key : {"loss", "grad_norm", "lr", "epoch"})
      EXPECT_EQ(got[s].at(key), want[s].at(key)) << key << " of step " << s + 1;
    // Every 2 steps, at the checkpoint (step 3) and at the end.
    EXPECT_EQ(got[s].contains("val_loss"), (s + 1) % 2 == 0 || s + 1 == 3) << "step " << s + 1;
    if (got[s].contains("val_loss") && want[s].contains("val_loss")) {
      EXPECT_EQ(got[s].at("val_loss"), want[s].at("val_loss")) << "step " << s + 1;
    }
  }
  EXPECT_EQ(file_bytes(w / "s.safetensors"), file_bytes(w / "straight.safetensors"));
  EXPECT_FALSE(file_bytes(w / "straight.safetensors").empty());
  const nlohmann::json run = manifest_of(w / "ck" / "step_00000006").at("run");
  EXPECT_EQ(run.at("steps"), 6);
  EXPECT_EQ(run.at("data"), nlohmann::json::array({(w / "train.bin").string()}));
  EXPECT_EQ(run.at("micro_batch"), 2);

  // Flags given over the record: each that changes the run warns once.
  CmdResult changed =
      train(2, bin,
            fmt::format(
                "--resume {} --steps 8 --data {}/train.bin --val-sequences 4 --metrics {}/o.jsonl",
                ck3, w.string(), w.string()));
  EXPECT_TRUE(has(changed,
                  "warning: --steps 8: the run was launched for 6 steps; the lr schedule now ends "
                  "at step 8, not 6\n"))
      << changed.out;
  EXPECT_TRUE(has(changed,
                  "warning: --val-sequences 4: the run was launched validating on 8 sequences; "
                  "validation losses from here on are not comparable with earlier ones\n"))
      << changed.out;
  EXPECT_FALSE(has(changed, "warning: --data")) << "the launched data, given again";
  EXPECT_EQ(read_metrics(w / "o.jsonl").size(), 5u);
  EXPECT_EQ(read_metrics(w / "m.jsonl").size(), 6u) << "another --metrics leaves it alone";

  // Written before runs were recorded: this run's flags and the spec's apply.
  const fs::path old = copy_of(ck3, w / "old");
  nlohmann::json m = manifest_of(old);
  m.erase("run");
  write_file(old / "manifest.json", m.dump(1));
  CmdResult before = train(2, bin, fmt::format("--resume {} --checkpoint-every 0", old.string()));
  EXPECT_TRUE(has(before, "records no run (written before fsdpgen recorded runs)")) << before.out;
  EXPECT_TRUE(has(before, "step 4/4 | loss")) << "the spec's 4 steps\n" << before.out;
}

// A binary whose global batch differs from the checkpoint's run (world 2 x
// 2 sequences) is refused on every rank with the build that keeps it; with
// --allow-batch-change it continues from the sequence the run reached: the
// 12th of the token file after 3 steps of 4, whatever it reads per step.
// Two such binaries (1 rank x 2, 2 ranks x 1) read the same sequences, so
// their losses agree; the next checkpoint counts the sequences read.
TEST(Checkpoint, AResumeThatChangesTheGlobalBatchIsRefusedOrContinuesFromTheSequenceReached) {
  const fs::path w = work("batch_change");
  write_token_file(w / "train.bin", random_token_ids(40 * 16 + 1, 64, 8));
  const std::string data = fmt::format("--data {}/train.bin", w.string());
  train(2, binary("as_launched", steps(E2eConfig{}, 4).spec()),
        fmt::format("{} --checkpoint-every 3 --checkpoint-dir {}/ck", data, w.string()));
  const std::string ck3 = (w / "ck" / "step_00000003").string();

  E2eConfig one = steps(E2eConfig{}, 4);
  one.world = 1;
  one.sharding = "no_shard";
  const fs::path one_bin = binary("w1_mb2", one.spec());
  CmdResult refused = run_binary(1, one_bin, "--resume " + ck3);
  EXPECT_EQ(refused.status, 1) << refused.out;
  EXPECT_TRUE(has(refused,
                  "the global batch changes from 4 sequences (world 2 x micro-batch 2 x 1 "
                  "micro-batch) to 2 sequences (world 1 x micro-batch 2 x 1 "
                  "micro-batch): build one that keeps it with `fsdpgen"))
      << refused.out;
  EXPECT_TRUE(has(refused, "--world 1 --micro-batch 4 -o")) << refused.out;
  EXPECT_FALSE(has(refused, "| loss")) << "nothing trained";

  E2eConfig two_by_one = steps(E2eConfig{}, 4);
  two_by_one.micro_batch = 1;
  std::vector<std::vector<double>> losses;
  for (const auto& [name, world, bin] :
       {std::tuple{"w1", 1, one_bin},
        std::tuple{"w2_mb1", 2, binary("w2_mb1", two_by_one.spec())}}) {
    const fs::path metrics = w / fmt::format("{}.jsonl", name);
    CmdResult r = train(world, bin,
                        fmt::format("--resume {} --allow-batch-change --checkpoint-dir {}/ck_{} "
                                    "--metrics {}",
                                    ck3, w.string(), name, metrics.string()));
    EXPECT_TRUE(has(r, "warning: --allow-batch-change: the global batch changes from 4 sequences"))
        << r.out;
    EXPECT_TRUE(has(r, "epoch 1 from sequence 12 of it")) << r.out;
    losses.push_back(read_losses(metrics));
    const nlohmann::json m = manifest_of(w / fmt::format("ck_{}", name) / "step_00000004");
    EXPECT_EQ(m.at("sequences"), 12 + 2) << name << ": one step of 2 after the checkpoint's 12";
  }
  ASSERT_EQ(losses[0].size(), 1u);
  ASSERT_EQ(losses[1].size(), 1u);
  EXPECT_NEAR(losses[1][0], losses[0][0], 1e-5 * std::abs(losses[0][0]))
      << "the same sequences 12 and 13, split over 1 rank or 2";
}

}  // namespace
}  // namespace fsdpgen::test
