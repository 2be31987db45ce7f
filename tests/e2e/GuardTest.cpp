// Guard: the loss-spike guard end to end (runtime/train/guard.h). A step whose loss
// or gradient norm jumps far above the last steps' (injected with the
// binary's --inject-spike, which multiplies one step's losses and loss
// gradient on every rank) is not applied: the shards and optimizer state after
// it are byte for byte those before it, the log names the step's rows on every
// rank, the metrics count it, a left-out step is not counted as applied
// (AdamW's bias correction, fp16's scale growth), and max_skips spikes in a
// row stop the run with a checkpoint that resumes after them. Each check trips alone (the loss
// check through the schedule's all-reduce of the loss over every rank), under every strategy; a run
// without a spike is the same with the guard as without it. A non-finite loss or norm without fp16
// loss scaling stops the run, naming the step and its rows.

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <tuple>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

E2eConfig guarded(const std::string& guard, int steps = 7) {
  E2eConfig c;
  c.steps = steps;
  c.train_extra = "  guard { " + guard + " }\n";
  return c;
}

TEST(Guard, ASpikeIsLeftOutByteForByteAndItsRowsAreNamed) {
  const E2eConfig c = guarded("loss_z = 6  norm_z = 6  window = 3");
  const fs::path bin = shared_binary(e2e_dir("guard_spike"), c.spec());
  const fs::path dir = bin.parent_path();
  fs::remove_all(dir / "ck");
  const CmdResult r =
      run_binary(c.world, bin,
                 "--metrics m.jsonl --inject-spike 4 --checkpoint-every 1 --checkpoint-keep 10 "
                 "--checkpoint-dir ck");
  ASSERT_EQ(r.status, 0) << r.out;
  // world 2, micro_batch 2: 0-based step 4 reads sequences 16..17 on rank 0, 18..19 on rank 1.
  EXPECT_NE(r.out.find("spike: step 5 not applied (the loss-spike guard): loss "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  rank 0: sequences 16..17: synthetic(seed=7) sequence 16; "
                       "synthetic(seed=7) sequence 17\n  rank 1: sequences 18..19: "
                       "synthetic(seed=7) sequence 18; synthetic(seed=7) sequence 19\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| skipped (loss spike)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 step left out by the loss-spike guard\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("skipped for non-finite gradients"), std::string::npos) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 7u);
  for (size_t s = 0; s < m.size(); ++s) {
    EXPECT_EQ(m[s].at("skipped").get<bool>(), s == 4) << "step " << s + 1;
    EXPECT_EQ(m[s].at("skipped_spike").get<int64_t>(), s >= 4 ? 1 : 0) << "step " << s + 1;
    EXPECT_EQ(m[s].at("loss_scale").get<double>(), 1.0) << "step " << s + 1;
  }
  EXPECT_GT(m[4].at("loss").get<double>(), 100 * m[3].at("loss").get<double>())
      << "the injected step's loss counts 1000 times";
  const auto before = checkpoint_shard_files(dir / "ck" / "step_00000004");
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE(checkpoint_shard_files(dir / "ck" / "step_00000005") == before)
      << "the shards after the left-out step differ from those before it";
  EXPECT_FALSE(checkpoint_shard_files(dir / "ck" / "step_00000006") == before)
      << "the step after it is applied";
}

// The rows a spike's report names are the rows its step read: the byte
// offsets in a shuffled text file, rank by rank, equal those --trace-data
// records as the step's fills read them.
TEST(Guard, TheRowsNamedAreTheRowsTheStepRead) {
  E2eConfig c = guarded("norm_z = 6  window = 3");
  c.vocab = 256;  // byte-level text
  const fs::path bin = shared_binary(e2e_dir("guard_rows"), c.spec());
  const fs::path dir = bin.parent_path();
  std::string text;
  for (int i = 0; i < 3000; ++i)
    text += static_cast<char>('a' + (i * 7919 + i / 13) % 26);
  std::ofstream(dir / "text.txt") << text;
  fs::remove(dir / "td.txt");
  const CmdResult r =
      run_binary(c.world, bin, "--data text.txt --inject-spike 4 --trace-data td.txt");
  ASSERT_EQ(r.status, 0) << r.out;
  std::map<int, std::vector<std::string>> named, read;
  const std::regex line(R"(\n  rank (\d+): sequences \d+\.\.\d+: ([^\n]*))");
  const size_t at = r.out.find("spike: step 5 not applied");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string report = r.out.substr(at, r.out.find("\nstep", at) - at);
  for (std::sregex_iterator m(report.begin(), report.end(), line), end; m != end; ++m) {
    const std::string rows = (*m)[2];
    const std::regex offset(R"(text\.txt byte offset (\d+))");
    for (std::sregex_iterator o(rows.begin(), rows.end(), offset); o != end; ++o)
      named[std::stoi((*m)[1])].push_back((*o)[1]);
  }
  std::istringstream trace(file_bytes(dir / "td.txt"));
  std::vector<std::tuple<int, int64_t, std::string>> fills;  // rank, sequence, offset
  for (std::string pass, hash, offset, source; trace >> pass;) {
    int64_t index = 0, rank = 0, micro = 0, sequence = 0;
    trace >> index >> rank >> micro >> sequence >> hash >> offset >> source;
    if (pass == "train" && index == 4) fills.emplace_back(rank, sequence, offset);
  }
  std::sort(fills.begin(), fills.end());
  for (const auto& [rank, sequence, offset] : fills)
    read[rank].push_back(offset);
  EXPECT_EQ(named.size(), 2u) << report;
  EXPECT_EQ(named, read) << report;
}

// Each check alone trips its gate, under each strategy: the loss one through
// the all-reduce of the loss over every rank that loss_z adds to the schedule.
struct GuardCase {
  std::string name, guard, sharding;
  int world, shard_group;
};

class GuardAlone : public ::testing::TestWithParam<GuardCase> {};

TEST_P(GuardAlone, TripsItsGate) {
  const GuardCase& g = GetParam();
  E2eConfig c = guarded(g.guard + "  window = 3", 6);
  c.sharding = g.sharding;
  c.world = g.world;
  c.shard_group = g.shard_group;
  const fs::path bin = shared_binary(e2e_dir("guard_" + g.name), c.spec());
  const CmdResult r = run_binary(c.world, bin, "--metrics m.jsonl --inject-spike 3");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
  ASSERT_EQ(m.size(), 6u);
  for (size_t s = 0; s < m.size(); ++s)
    EXPECT_EQ(m[s].at("skipped").get<bool>(), s == 3) << "step " << s + 1;
  const CmdResult schedule =
      run(fmt::format("schedule {} --gpu cpu", (bin.parent_path() / "e2e.fsdp").string()));
  ASSERT_EQ(schedule.status, 0) << schedule.out;
  EXPECT_EQ(schedule.out.find("over world x") != std::string::npos, g.guard.find("loss_z") == 0)
      << "loss_z alone adds the loss's all-reduce over the world:\n"
      << schedule.out;
}

INSTANTIATE_TEST_SUITE_P(
    Checks, GuardAlone,
    ::testing::Values(GuardCase{"loss_full", "loss_z = 6", "full_shard", 2, 0},
                      GuardCase{"norm_full", "norm_z = 6", "full_shard", 2, 0},
                      GuardCase{"loss_noshard", "loss_z = 6", "no_shard", 2, 0},
                      GuardCase{"loss_hybrid", "loss_z = 6", "hybrid_shard", 4, 2}),
    [](const ::testing::TestParamInfo<GuardCase>& i) { return i.param.name; });

TEST(Guard, ARunWithoutSpikesIsTheSameWithTheGuard) {
  E2eConfig plain;
  plain.steps = 6;
  const fs::path a = shared_binary(e2e_dir("guard_none"), plain.spec());
  const fs::path b = shared_binary(e2e_dir("guard_quiet"),
                                   guarded("loss_z = 6  norm_z = 6  window = 2", 6).spec());
  ASSERT_EQ(run_binary(2, a, "--metrics m.jsonl").status, 0);
  const CmdResult r = run_binary(2, b, "--metrics m.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(read_losses(a.parent_path() / "m.jsonl"), read_losses(b.parent_path() / "m.jsonl"));
  for (const nlohmann::json& s : read_metrics(b.parent_path() / "m.jsonl"))
    EXPECT_FALSE(s.at("skipped").get<bool>()) << s.dump();
}

// A left-out step does not count as applied: AdamW's bias correction and
// fp16's loss-scale growth go on from the steps applied. After a spike at
// step 5 the manifests say 4 applied steps at step 5 and 5 at step 6, and
// step 6's checkpoint (shards, loss scale, guard window) is byte for byte
// step 5's of a run that never saw the spiked batch: the same token file, read
// in file order, without that batch's windows (its first token kept, as the
// window before ends on it), on a constant lr so that step 6 and step 5 get
// the same.
struct LeftOutCase {
  std::string name, param, loss_scale;
};

void PrintTo(const LeftOutCase& c, std::ostream* os) {
  *os << c.name;
}

class GuardLeftOut : public ::testing::TestWithParam<LeftOutCase> {};

TEST_P(GuardLeftOut, AStepLeftOutIsNotCountedAsApplied) {
  const LeftOutCase& g = GetParam();
  E2eConfig c = guarded("loss_z = 6  window = 3", 6);
  c.param = g.param;
  std::string spec = c.spec();
  const std::string cosine = "cosine(warmup = 1, min = 1e-3)", master = "master = fp32 }";
  spec.replace(spec.find(cosine), cosine.size(), "constant(warmup = 1)");
  if (!g.loss_scale.empty())
    spec.replace(spec.find(master), master.size(),
                 "master = fp32  loss_scale = " + g.loss_scale + " }");
  const fs::path bin = shared_binary(e2e_dir("guard_left_out_" + g.name), spec);
  const fs::path dir = bin.parent_path();
  // world 2 x micro_batch 2: step s (0-based) reads windows 4s..4s+3 of 16 tokens.
  const int64_t T = 16, batch = 4 * T, spiked = 4;
  const std::vector<int32_t> without = random_token_ids(5 * batch + 1, 64, 11);
  std::vector<int32_t> with(without.begin(), without.begin() + spiked * batch);
  std::vector<int32_t> extra = random_token_ids(batch, 64, 12);
  extra[0] = without[spiked * batch];
  with.insert(with.end(), extra.begin(), extra.end());
  with.insert(with.end(), without.begin() + spiked * batch, without.end());
  write_token_file(dir / "with.bin", with);
  write_token_file(dir / "without.bin", without);
  fs::remove_all(dir / "ck_with");
  fs::remove_all(dir / "ck_without");
  const std::string every = "--checkpoint-every 1 --checkpoint-keep 10";
  const CmdResult a = run_binary(
      c.world, bin,
      fmt::format(
          "--data with.bin --shuffle false --steps 6 --inject-spike {} {} --checkpoint-dir ck_with "
          "--metrics with.jsonl",
          spiked, every));
  ASSERT_EQ(a.status, 0) << a.out;
  const CmdResult b = run_binary(
      c.world, bin,
      fmt::format(
          "--data without.bin --shuffle false --steps 5 {} --checkpoint-dir ck_without --metrics "
          "without.jsonl",
          every));
  ASSERT_EQ(b.status, 0) << b.out;
  const std::vector<nlohmann::json> ma = read_metrics(dir / "with.jsonl"),
                                    mb = read_metrics(dir / "without.jsonl");
  ASSERT_EQ(ma.size(), 6u);
  ASSERT_EQ(mb.size(), 5u);
  for (size_t s = 0; s < ma.size(); ++s)
    EXPECT_EQ(ma[s].at("skipped").get<bool>(), s == 4) << "step " << s + 1 << "\n" << a.out;
  for (size_t s = 0; s < mb.size(); ++s)
    EXPECT_FALSE(mb[s].at("skipped").get<bool>()) << "step " << s + 1 << "\n" << b.out;

  auto manifest = [&](const std::string& ck, int step) {
    return nlohmann::json::parse(
        file_bytes(dir / ck / fmt::format("step_{:08}", step) / "manifest.json"));
  };
  const nlohmann::json a4 = manifest("ck_with", 4), a5 = manifest("ck_with", 5),
                       a6 = manifest("ck_with", 6), b5 = manifest("ck_without", 5);
  EXPECT_EQ(a4.at("applied_steps"), 4);
  EXPECT_EQ(a5.at("applied_steps"), 4) << "the left-out step 5 counted as applied";
  EXPECT_EQ(a6.at("applied_steps"), 5);
  EXPECT_EQ(b5.at("applied_steps"), 5);
  EXPECT_EQ(a5.at("loss_scale"), a4.at("loss_scale")) << "the left-out step moved the loss scale";
  for (const char* key : {"loss_scale", "applied_steps", "guard"})
    EXPECT_EQ(a6.at(key), b5.at(key)) << key;
  const auto shards = checkpoint_shard_files(dir / "ck_without" / "step_00000005");
  ASSERT_FALSE(shards.empty());
  EXPECT_TRUE(checkpoint_shard_files(dir / "ck_with" / "step_00000006") == shards)
      << "the weights and optimizer state after step 6 are not those of the run that never saw "
         "step 5's batch";
}

// fp16 from a small scale that doubles every 2 finite steps: a spike counted
// as one would double it at step 5.
INSTANTIATE_TEST_SUITE_P(
    Precisions, GuardLeftOut,
    ::testing::Values(LeftOutCase{"fp32", "fp32", ""},
                      LeftOutCase{"fp16", "fp16", "dynamic(init = 16, interval = 2)"}),
    [](const ::testing::TestParamInfo<LeftOutCase>& i) { return i.param.name; });

// max_skips spikes in a row: the run stops (exit status 4) with a checkpoint
// whose shards are those before the spikes, and which resumes after them. The
// guard's window travels in the checkpoint: a spike right after the resume is
// left out as in a straight run that met the same spikes (a window that
// started empty would let it through, and the next step's loss would differ).
TEST(Guard, MaxSkipsInARowStopWithACheckpointThatResumesAfterThem) {
  const E2eConfig c = guarded("norm_z = 6  window = 3  max_skips = 2", 9);
  const fs::path bin = shared_binary(e2e_dir("guard_stop"), c.spec());
  const fs::path dir = bin.parent_path();
  fs::remove_all(dir / "ck");
  const CmdResult r = run_binary(c.world, bin,
                                 "--metrics m.jsonl --checkpoint-every 1 --checkpoint-keep 10 "
                                 "--checkpoint-dir ck --inject-spike 4 --inject-spike 5");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_NE(r.out.find("stopped after step 6 of 9: the loss-spike guard left out 2 steps in a "
                       "row (steps 5 to 6, max_skips 2)"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(checkpoint_shard_files(dir / "ck" / "step_00000006") ==
              checkpoint_shard_files(dir / "ck" / "step_00000004"));
  EXPECT_FALSE(fs::exists(dir / "ck" / "step_00000007"));
  const CmdResult resumed =
      run_binary(c.world, bin, "--resume ck --metrics resumed.jsonl --inject-spike 7");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  const fs::path straight_dir = e2e_dir("guard_stop_straight");
  const fs::path straight =
      shared_binary(straight_dir, guarded("norm_z = 6  window = 3  max_skips = 3", 9).spec());
  ASSERT_EQ(run_binary(c.world, straight,
                       "--metrics m.jsonl --inject-spike 4 --inject-spike 5 "
                       "--inject-spike 7")
                .status,
            0);
  const std::vector<nlohmann::json> all = read_metrics(straight_dir / "m.jsonl");
  const std::vector<nlohmann::json> rest = read_metrics(dir / "resumed.jsonl");
  ASSERT_EQ(all.size(), 9u);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t s = 6; s < 9; ++s) {
    EXPECT_EQ(rest[s - 6].at("loss").get<double>(), all[s].at("loss").get<double>())
        << "step " << s + 1;
    EXPECT_EQ(rest[s - 6].at("skipped").get<bool>(), s == 7) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace fsdpgen::test
