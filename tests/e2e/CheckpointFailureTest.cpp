// CheckpointFailure: every kind of bad checkpoint, and a save that cannot be
// written, stops every rank with an error that names the problem, and a failed
// save leaves the earlier checkpoints as they were.
#include <algorithm>
#include <tuple>

#include "tests/e2e/Checkpoint.h"

namespace fsdpgen::test {
namespace {

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
  EXPECT_FALSE(has(r, "rank 0: error")) << "rank 1's error is said once, by rank 0\n" << r.out;

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
  EXPECT_TRUE(has(r, fmt::format("error: --checkpoint-dir {}: cannot create the directory {}: "
                                 "Not a directory",
                                 ck.string(), ck.string())))
      << r.out;
  EXPECT_FALSE(has(r, ": error: --checkpoint-dir")) << "every rank's error, said once\n" << r.out;
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
  // Rank 0 says the error of the rank that failed, naming it.
  struct failure {
    std::string name, env;
    std::vector<std::string> errors;
  };
  const std::vector<failure> failures = {
      {"shard",
       "FSDPGEN_TEST_FAIL_OPEN=step_00000002.partial/shard_00001.bin",
       {"rank 1: error: cannot create {ck}/step_00000002.partial/shard_00001.bin: Input/output "
        "error"}},
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

}  // namespace
}  // namespace fsdpgen::test
