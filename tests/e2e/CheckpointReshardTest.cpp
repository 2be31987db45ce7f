// CheckpointReshard: a checkpoint resumes on another world size and wrap policy
// (Muon's too, shuffled token files too) with the uninterrupted run's losses,
// and a resume that changes the global batch is refused or continues from the
// sequence reached.
#include <algorithm>
#include <tuple>

#include "tests/e2e/Checkpoint.h"

namespace fsdpgen::test {
namespace {

// A config of 2 ranks on 1 rank, and on 4 with two blocks a unit: the same
// global batch of 4 sequences.
E2eConfig on_one_rank(E2eConfig c) {
  c.sharding = "no_shard";
  c.world = 1;
  c.micro_batch = 4;
  return c;
}
E2eConfig on_four_ranks_two_blocks_a_unit(E2eConfig c) {
  c.world = 4;
  c.micro_batch = 1;
  c.units = "group 2 blocks";
  return c;
}

// `two` (2 ranks, 5 steps) run straight, and again with a checkpoint at
// step 2, which binaries for 4 ranks with two blocks a unit, for 1 rank and
// for each of `more` (a name and a config) resume: steps 3 to 5 lose at most
// 1e-5 (relative) against the uninterrupted run's.
void expect_resumes_elsewhere(const std::string& tag, const E2eConfig& two,
                              const std::vector<std::pair<std::string, E2eConfig>>& more = {}) {
  const fs::path bin = binary(tag + "_w2", two.spec());
  const fs::path w = work(tag);
  const std::string ck = (w / "ck").string();
  train(2, bin, fmt::format("--metrics {}", (w / "straight.jsonl").string()));
  train(2, bin, fmt::format("--checkpoint-every 2 --checkpoint-keep 10 --checkpoint-dir {}", ck));
  const std::vector<double> want = read_losses(w / "straight.jsonl");
  ASSERT_EQ(want.size(), 5u);
  std::vector<std::pair<std::string, E2eConfig>> others = {
      {"w4_group2", on_four_ranks_two_blocks_a_unit(two)}, {"w1", on_one_rank(two)}};
  others.insert(others.end(), more.begin(), more.end());
  for (const auto& [name, c] : others) {
    const fs::path other = binary(tag + "_" + name, c.spec());
    const fs::path metrics = w / (name + ".jsonl");
    CmdResult r =
        train(c.world, other,
              fmt::format("--resume {}/step_00000002 --metrics {}", ck, metrics.string()));
    EXPECT_TRUE(has(r, "(step 2, 8 sequences read)")) << r.out;
    const std::vector<double> got = read_losses(metrics);
    ASSERT_EQ(got.size(), 3u) << name;
    for (size_t s = 0; s < got.size(); ++s) {
      const double rel = std::abs(got[s] - want[s + 2]) / std::abs(want[s + 2]);
      std::printf("%s %s step %zu: loss %.9f, uninterrupted %.9f, relative difference %.2e\n",
                  tag.c_str(), name.c_str(), s + 3, got[s], want[s + 2], rel);
      EXPECT_LE(rel, 1e-5) << tag << " " << name << " step " << s + 3;
    }
  }
}

// A Muon checkpoint written by 2 ranks (each matrix's momentum with its
// owner) resumed on 1 rank (one owner for all) and on 4 with two blocks a
// unit (other owners, other slices): the same losses as the uninterrupted
// run within 1e-5 (fp32: only the order of summation differs).
TEST(Checkpoint, MuonResumesOnAnotherWorldSize) {
  E2eConfig two = steps(E2eConfig{}, 5);
  two.optimizer = kMuon;
  expect_resumes_elsewhere("muon_reshard", two);
}

// Written by 2 ranks with a unit per block, resumed by binaries of the same
// model for 4 ranks with two blocks per unit, for one rank, and for 2 ranks
// with each linear layer its own unit (tensors split across units): the same
// global batch, so the same losses as the uninterrupted run (fp32: only the
// order of summation differs).
TEST(Checkpoint, ResumesOnAnotherWorldSizeAndWrapPolicy) {
  const E2eConfig two = steps(E2eConfig{}, 5);
  E2eConfig linear = two;  // block units to per-linear units (sub-block), with recompute
  linear.units = "each linear";
  linear.recompute = "block";
  expect_resumes_elsewhere("reshard", two, {{"w2_each_linear", linear}});
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
  const E2eConfig one = on_one_rank(two);
  const E2eConfig four = on_four_ranks_two_blocks_a_unit(two);
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
