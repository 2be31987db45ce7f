// Guard: the loss-spike guard end to end (runtime/guard.h). A step whose loss
// or gradient norm jumps far above the last steps' (injected with the
// binary's --inject-spike, which multiplies one step's losses and loss
// gradient on every rank) is not applied: the shards and optimizer state after
// it are byte for byte those before it, the log names the step's rows on every
// rank, the metrics count it, and max_skips spikes in a row stop the run with a
// checkpoint that resumes after them. Each check trips alone (the loss check
// through the schedule's all-reduce of the loss over every rank), under every
// strategy; a run without a spike is the same with the guard as without it. A
// non-finite loss or norm without fp16 loss scaling stops the run, naming the
// step and its rows.

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
