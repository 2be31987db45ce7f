// RunSettingsTest: the run as launched (flags over the spec), and on resume
// the recorded run with the flags given over it: what is taken back, which
// overrides warn and with what effect, and the global batch kept or refused
// with the build that keeps it.
#include <gtest/gtest.h>

#include "runtime/train/run_settings.h"

namespace {

// The spec's values: 200 steps, synthetic data, checkpoints every 100 into
// "ckpt", world 2, micro-batch 4, 2 micro-batches (16 sequences a step).
program spec_program() {
  program p{};
  p.spec_path = "specs/tiny.fsdp";
  p.train.steps = 200;
  p.train.checkpoint = {100, "ckpt", 2};
  p.train.log_every = 10;
  p.parallel.world = 2;
  p.parallel.micro_batch = 4;
  p.parallel.micro_batches = 2;
  return p;
}

// The run launched with --steps 60 --data train.bin --metrics m.jsonl.
checkpoint_run launched(const program& p) {
  run_flags f;
  f.steps = 60;
  f.data = {"train.bin"};
  f.metrics = "m.jsonl";
  return run_settings_of(p, f);
}

TEST(RunSettings, FlagsOverTheSpec) {
  const program p = spec_program();
  const checkpoint_run fresh = run_settings_of(p, run_flags{});
  EXPECT_EQ(fresh.steps, 200);
  EXPECT_TRUE(fresh.data.empty()) << "the spec's data";
  EXPECT_EQ(fresh.checkpoint_every, 100);
  EXPECT_EQ(fresh.checkpoint_dir, "ckpt");
  EXPECT_EQ(fresh.checkpoint_keep, 2);
  EXPECT_EQ(fresh.log_every, 10);
  EXPECT_EQ(fresh.val_every, 0) << "no validation without val";
  EXPECT_EQ(run_settings_global_batch(p.parallel.world, fresh), 16);
  const checkpoint_run r = launched(p);
  EXPECT_EQ(r.steps, 60);
  EXPECT_EQ(r.data, std::vector<std::string>{"train.bin"});
  EXPECT_EQ(r.metrics, "m.jsonl");
  run_flags val;
  val.val = {"val.bin"};
  EXPECT_EQ(run_settings_of(p, val).val_every, 250) << "--val alone validates every 250 steps";
  EXPECT_EQ(run_settings_of(p, val).val_sequences, 256);
}

// A spec that names validation data with val_every = 0 validates only where
// --val-every asks, whatever --val names.
TEST(RunSettings, ASpecsValEveryZeroIsKeptUnlessTheFlagAsks) {
  program p = spec_program();
  p.train.val_every = 0;
  p.train.val_sequences = 32;  // the spec names val
  run_flags val;
  val.val = {"other_val.bin"};
  EXPECT_EQ(run_settings_of(p, val).val_every, 0);
  val.val_every = 7;
  EXPECT_EQ(run_settings_of(p, val).val_every, 7);
}

// A plain --resume is the launched run: its steps (so its lr schedule), data
// and metrics, said once as the flags a fresh launch would need.
TEST(RunSettings, APlainResumeIsTheLaunchedRun) {
  const program p = spec_program();
  const run_resumed r = run_settings_resume(p, run_flags{}, launched(p), 2, 26, false, "./train");
  EXPECT_EQ(r.run.steps, 60);
  EXPECT_EQ(r.run.data, std::vector<std::string>{"train.bin"});
  EXPECT_EQ(r.run.metrics, "m.jsonl");
  EXPECT_EQ(r.taken,
            (std::vector<std::string>{"--steps 60", "--data train.bin", "--metrics m.jsonl"}));
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(r.batch_problem, "");
}

// A flag given again with the launched value changes nothing and says nothing.
TEST(RunSettings, TheSameFlagsGivenAgainAreSilent) {
  const program p = spec_program();
  run_flags f;
  f.steps = 60;
  f.data = {"train.bin"};
  const run_resumed r = run_settings_resume(p, f, launched(p), 2, 26, false, "./train");
  EXPECT_EQ(r.taken, std::vector<std::string>{"--metrics m.jsonl"});
  EXPECT_TRUE(r.warnings.empty());
}

// Overrides that change the run warn, one line each, with the effect.
TEST(RunSettings, OverridesThatChangeTheRunWarnWithTheirEffect) {
  const program p = spec_program();
  run_flags f;
  f.steps = 200;
  f.data = {"other.bin"};
  f.shuffle = "true";
  f.val = {"v.bin"};
  f.val_sequences = 32;
  f.checkpoint_every = 5;  // operational: no warning
  f.metrics = "n.jsonl";
  const run_resumed r = run_settings_resume(p, f, launched(p), 2, 26, false, "./train");
  EXPECT_EQ(r.run.steps, 200);
  EXPECT_EQ(r.run.data, std::vector<std::string>{"other.bin"});
  EXPECT_TRUE(r.run.shuffle);
  EXPECT_EQ(r.run.checkpoint_every, 5);
  EXPECT_EQ(r.run.metrics, "n.jsonl");
  EXPECT_TRUE(r.taken.empty());
  EXPECT_EQ(
      r.warnings,
      (std::vector<std::string>{
          "--steps 200: the run was launched for 60 steps; the lr schedule now ends at step 200, "
          "not 60",
          "--data other.bin: the run was launched reading train.bin; from step 27 it trains on "
          "other.bin from the sequence the run reached",
          "--shuffle true: the run was launched with shuffle false; the sequences after step 26 "
          "come in another order",
          "--val v.bin: the run was launched validating on the spec's validation data; "
          "validation losses from here on are not comparable with earlier ones",
          "--val-sequences 32: the run was launched validating on 256 sequences; validation "
          "losses from here on are not comparable with earlier ones"}));
}

// Another binary (world 4, micro-batch 4, 2 micro-batches: 32 a step) for a
// run of 16 a step: refused with the build that keeps it, or allowed with a
// warning.
TEST(RunSettings, AChangedGlobalBatchIsRefusedWithTheBuildThatKeepsIt) {
  const program two = spec_program();
  const checkpoint_run recorded = launched(two);
  program four = spec_program();
  four.parallel.world = 4;
  const run_resumed refused =
      run_settings_resume(four, run_flags{}, recorded, 2, 26, false, "./train4");
  EXPECT_EQ(refused.batch_problem,
            "the global batch changes from 16 sequences (world 2 x micro-batch 4 x 2 "
            "micro-batches) to 32 sequences (world 4 x micro-batch 4 x 2 micro-batches): build "
            "one that keeps it with `fsdpgen specs/tiny.fsdp --world 4 --micro-batch 2 -o "
            "./train4`; pass --allow-batch-change to continue with 32 sequences a step");
  const run_resumed allowed =
      run_settings_resume(four, run_flags{}, recorded, 2, 26, true, "./train4");
  EXPECT_EQ(allowed.batch_problem, "");
  ASSERT_EQ(allowed.warnings.size(), 1u);
  EXPECT_EQ(allowed.warnings[0],
            "--allow-batch-change: the global batch changes from 16 sequences (world 2 x "
            "micro-batch 4 x 2 micro-batches) to 32 sequences (world 4 x micro-batch 4 x 2 "
            "micro-batches); the run continues from the sequence it reached, 32 sequences a "
            "step, and its loss curve and lr no longer match the launched run's");
  // World 3 with 2 micro-batches: 16 is not 3 x 2 x k; world 8: 16 / 8 = 2
  // sequences a rank, but 2 micro-batches of 1 need the spec's micro_batch.
  program three = spec_program();
  three.parallel.world = 3;
  EXPECT_NE(run_settings_resume(three, run_flags{}, recorded, 2, 26, false, "./t")
                .batch_problem.find("no binary for 3 ranks keeps it (16 is not a multiple of 3)"),
            std::string::npos);
  program eight = spec_program();
  eight.parallel.world = 8;
  eight.parallel.micro_batches = 4;
  EXPECT_NE(run_settings_resume(eight, run_flags{}, recorded, 2, 26, false, "./t")
                .batch_problem.find("`fsdpgen specs/tiny.fsdp --world 8 -o ./t` from a spec "
                                    "whose micro_batch x accumulate's micro_batches is 2"),
            std::string::npos);
  program one = spec_program();
  one.parallel.world = 1;
  one.parallel.micro_batch = 8;
  EXPECT_EQ(run_settings_resume(one, run_flags{}, recorded, 2, 26, false, "./t").batch_problem, "")
      << "world 1 x 8 x 2 is the same 16";
}

TEST(RunSettings, TheResumeCommandStartsTheBinaryAsThisRunWas) {
  EXPECT_EQ(run_settings_resume_command("mpirun", false, 2, "./train", "ckpt"),
            "mpirun -n 2 ./train --resume ckpt");
  EXPECT_EQ(run_settings_resume_command("srun", false, 16, "./train", "/scratch/ck"),
            "srun -n 16 --mpi=pmix ./train --resume /scratch/ck");
  EXPECT_EQ(run_settings_resume_command("single process", false, 1, "./train", "ckpt"),
            "./train --resume ckpt");
  EXPECT_EQ(run_settings_resume_command("mpirun", true, 2, "./train", "ckpt"),
            "./train --resume ckpt")
      << "started alone, it re-launches itself again";
}

}  // namespace
