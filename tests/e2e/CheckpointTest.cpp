// Checkpoint: saving and resuming training end to end. A run cut at step K,
// checkpointed and resumed to step N gives every step's loss and the final
// weights bit for bit as the uninterrupted N steps (fp32, bf16 hybrid with
// micro-batches, fp16 with a skipped step before the cut, SGD with momentum,
// Muon); old and partial checkpoints are removed; a resume at or past the last
// step trains nothing; a plain resume is the run as launched, and each run
// flag given on a resume changes only its own setting. Resuming on other
// worlds: CheckpointReshardTest.cpp; failures: CheckpointFailureTest.cpp.
#include <algorithm>
#include <tuple>

#include "tests/e2e/Checkpoint.h"

namespace fsdpgen::test {
namespace {

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

// Each run flag given alone on --resume changes its own setting and nothing
// else: the newest checkpoint's recorded run is the launched one with that
// one value changed, and where the flag does not change the training (all
// but --steps, --data and --shuffle) that checkpoint is otherwise the
// uninterrupted run's step 6, manifest and shards, and steps 4-6 train to the
// same losses.
TEST(Checkpoint, EachFlagOnResumeChangesOnlyItsOwnSetting) {
  const fs::path w = work("one_flag");
  write_token_file(w / "train.bin", random_token_ids(40 * 16 + 1, 64, 5));
  write_token_file(w / "other.bin", random_token_ids(40 * 16 + 1, 64, 7));
  write_token_file(w / "val.bin", random_token_ids(8 * 16 + 1, 64, 6));
  write_token_file(w / "val2.bin", random_token_ids(8 * 16 + 1, 64, 8));
  const fs::path bin = binary("as_launched", steps(E2eConfig{}, 4).spec());
  const std::string ck = (w / "ck").string();
  train(2, bin,
        fmt::format("--steps 6 --data {0}/train.bin --val {0}/val.bin --val-every 2 "
                    "--val-sequences 8 --checkpoint-every 3 --checkpoint-keep 5 --checkpoint-dir "
                    "{1} --log-every 1 --save {0}/s.safetensors --metrics {0}/m.jsonl",
                    w.string(), ck));
  const nlohmann::json straight = manifest_of(w / "ck" / "step_00000006");
  const std::vector<nlohmann::json> straight_metrics = read_metrics(w / "m.jsonl");
  ASSERT_EQ(straight_metrics.size(), 6u);
  const fs::path cut = copy_of(w / "ck" / "step_00000003", w / "cut");
  const std::map<std::string, std::string> straight_shards =
      checkpoint_shard_files(w / "ck" / "step_00000006");

  struct one_flag {
    std::string flag, key;
    nlohmann::json value;
    bool trains_the_same;
  };
  const std::string d = w.string();
  const std::vector<one_flag> flags = {
      {"--steps 7", "steps", 7, false},
      {"--data " + d + "/other.bin", "data", nlohmann::json::array({d + "/other.bin"}), false},
      {"--shuffle false", "shuffle", false, false},
      {"--val " + d + "/val2.bin", "val", nlohmann::json::array({d + "/val2.bin"}), true},
      {"--val-every 3", "val_every", 3, true},
      {"--val-sequences 4", "val_sequences", 4, true},
      {"--checkpoint-every 2", "checkpoint_every", 2, true},
      {"--checkpoint-dir " + d + "/ck2", "checkpoint_dir", d + "/ck2", true},
      {"--checkpoint-keep 3", "checkpoint_keep", 3, true},
      {"--log-every 2", "log_every", 2, true},
      {"--save " + d + "/t.safetensors", "save", d + "/t.safetensors", true},
      {"--metrics " + d + "/n.jsonl", "metrics", d + "/n.jsonl", true},
  };
  for (const one_flag& f : flags) {
    SCOPED_TRACE(f.flag);
    fs::remove_all(w / "ck");
    fs::remove_all(w / "ck2");
    fs::create_directories(w / "ck");
    fs::copy(cut, w / "ck" / "step_00000003");
    const CmdResult r = train(2, bin, fmt::format("--resume {}/step_00000003 {}", ck, f.flag));
    if (r.status != 0) continue;
    nlohmann::json want = straight.at("run");
    ASSERT_TRUE(want.contains(f.key));
    ASSERT_NE(want[f.key], f.value) << "the flag gives the launched value";
    want[f.key] = f.value;
    const fs::path dir = f.key == "checkpoint_dir" ? w / "ck2" : w / "ck";
    const std::vector<std::string> names = names_in(dir);
    ASSERT_FALSE(names.empty()) << r.out;
    nlohmann::json newest = manifest_of(dir / names.back());
    EXPECT_EQ(newest.at("run"), want) << "the recorded run of " << names.back();
    if (!f.trains_the_same) continue;
    EXPECT_EQ(newest.at("step"), 6) << r.out;
    nlohmann::json rest = straight;
    rest.erase("run");
    newest.erase("run");
    EXPECT_EQ(newest, rest) << "the manifest of step 6 beside its run";
    EXPECT_TRUE(checkpoint_shard_files(dir / "step_00000006") == straight_shards)
        << "the shards of step 6";
    const std::vector<nlohmann::json> m =
        read_metrics(f.key == "metrics" ? w / "n.jsonl" : w / "m.jsonl");
    ASSERT_GE(m.size(), 3u);
    for (size_t s = 0; s < 3; ++s)
      for (const char* key : {"loss", "grad_norm", "lr"})
        EXPECT_EQ(m[m.size() - 3 + s].at(key), straight_metrics[3 + s].at(key))
            << key << " of step " << s + 4;
  }
}

}  // namespace
}  // namespace fsdpgen::test
