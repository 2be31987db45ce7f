// Checker: defaults are filled in, strategies resolve their groups, and the
// semantic rules of DESIGN §2 reject what they must.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "dsl/Layers.h"
#include "dsl/Print.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

TEST(Check, DefaultsAreFilledIn) {
  Spec s = load_ok(with_model(""));
  EXPECT_EQ(s.model.family, Family::Gpt2);
  EXPECT_EQ(s.model.ffn_hidden, 4 * 64);
  EXPECT_EQ(s.model.kv_heads, 4);
  EXPECT_TRUE(s.model.tie_embeddings);
  EXPECT_EQ(s.parallel.world, 1);
  EXPECT_EQ(s.parallel.sharding, Sharding::FullShard);
  EXPECT_EQ(s.parallel.shard_group, 1);
  EXPECT_EQ(s.parallel.precision.param, DType::FP32);
  EXPECT_TRUE(s.parallel.prefetch.forward);
  EXPECT_EQ(s.parallel.prefetch.backward, BackwardPrefetch::Pre);
  EXPECT_EQ(s.parallel.accumulate.micro_batches, 1);
  EXPECT_EQ(s.train.optimizer.kind, OptimizerKind::AdamW);
  EXPECT_EQ(s.train.data.kind, DataKind::Synthetic);
  EXPECT_FALSE(s.train.checkpoint.enabled);
  ASSERT_EQ(s.units.units.size(), 5u);  // root + 4 blocks
  EXPECT_EQ(s.units.units[0].name, "root");
}

TEST(Check, ShardGroupsResolvePerStrategy) {
  auto group = [](const std::string& parallel) {
    return load_ok(with_model("parallel { " + parallel + " }")).parallel;
  };
  EXPECT_EQ(group("world = 8 sharding = full_shard").shard_group, 8);
  EXPECT_EQ(group("world = 8 sharding = shard_grad_op").shard_group, 8);
  EXPECT_EQ(group("world = 8 sharding = no_shard").shard_group, 1);
  EXPECT_EQ(group("world = 8 sharding = no_shard").replicas(), 8);
  EXPECT_EQ(group("world = 16 sharding = hybrid_shard").shard_group, 8);  // ranks per node
  EXPECT_EQ(group("world = 16 sharding = hybrid_shard ranks_per_node = 4").shard_group, 4);
  ParallelSpec h = group("world = 4 sharding = hybrid_shard_zero2 shard_group = 2");
  EXPECT_EQ(h.shard_group, 2);
  EXPECT_EQ(h.replicas(), 2);
}

TEST(Check, AllKnobsAreRead) {
  Spec s = load_ok(with_model(R"(
parallel {
  world = 4  sharding = hybrid_shard  shard_group = 2  ranks_per_node = 2  shard_align = 512
  precision { param = bf16  reduce = fp16  master = fp32 }
  prefetch { forward = false  backward = post  max_inflight = 3 }
  recompute = block  offload = cpu
  accumulate { micro_batches = 4  reduce = last }
}
train {
  optimizer = sgd(lr = 0.1, momentum = 0.8, weight_decay = 0.01)
  lr_schedule = linear(warmup = 5, min = 1e-3)
  micro_batch = 3  steps = 50  clip = none  seed = 9
  data = tokens("a.bin")
  checkpoint(every = 10, dir = "out", keep = 3)
  log_every = 5
})"));
  const ParallelSpec& p = s.parallel;
  EXPECT_EQ(p.shard_align_bytes, 512);
  EXPECT_EQ(p.precision.param, DType::BF16);
  EXPECT_EQ(p.precision.reduce, DType::FP16);
  EXPECT_FALSE(p.prefetch.forward);
  EXPECT_EQ(p.prefetch.backward, BackwardPrefetch::Post);
  EXPECT_EQ(p.prefetch.max_inflight, 3);
  EXPECT_EQ(p.recompute, Recompute::Block);
  EXPECT_EQ(p.offload, Offload::Cpu);
  EXPECT_EQ(p.accumulate.reduce, AccumulateReduce::Last);
  const TrainSpec& t = s.train;
  EXPECT_EQ(t.optimizer.kind, OptimizerKind::Sgd);
  EXPECT_DOUBLE_EQ(t.optimizer.momentum, 0.8);
  EXPECT_DOUBLE_EQ(t.optimizer.weight_decay, 0.01);
  EXPECT_EQ(t.lr_schedule.kind, LrScheduleKind::Linear);
  EXPECT_EQ(t.lr_schedule.warmup, 5);
  EXPECT_DOUBLE_EQ(t.clip, 0);
  EXPECT_EQ(t.data.kind, DataKind::Tokens);
  EXPECT_EQ(t.data.paths, std::vector<std::string>{"a.bin"});
  EXPECT_TRUE(t.checkpoint.enabled);
  EXPECT_EQ(t.checkpoint.keep, 3);
}

// Precision takes the spec's spelling and safetensors' and PyTorch's, in any
// case; anything else is still an error with a suggestion.
TEST(Check, DtypesTakeEverySpelling) {
  auto precision = [](const std::string& words) {
    return load_ok(with_model("parallel { precision { " + words + " } }")).parallel.precision;
  };
  PrecisionSpec p = precision("param = BF16 reduce = f32 master = float32");
  EXPECT_EQ(p.param, DType::BF16);
  EXPECT_EQ(p.reduce, DType::FP32);
  EXPECT_EQ(p.master, DType::FP32);
  p = precision("param = f16 reduce = float16");
  EXPECT_EQ(p.param, DType::FP16);
  EXPECT_EQ(p.reduce, DType::FP16);
  EXPECT_EQ(precision("param = bfloat16").param, DType::BF16);
  const std::string e = load_error(with_model("parallel { precision { param = fp8 } }"));
  EXPECT_NE(e.find("unknown dtype 'fp8'"), std::string::npos) << e;
}

// A relative data path in a spec file is found from the spec's directory,
// and is as relative as the spec's path; an absolute one is kept; text given
// directly (no file) keeps the path as written.
TEST(Check, DataPathsAreFoundFromTheSpecsDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "check_data_path" / "specs";
  fs::create_directories(dir);
  const std::string relative = with_model("train { data = text(\"../data/input.txt\") }");
  std::ofstream(dir / "r.fsdp") << relative;
  std::ofstream(dir / "a.fsdp") << with_model("train { data = tokens(\"/x/train.bin\") }");
  FrontendResult r = load_spec_file((dir / "r.fsdp").string());
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_EQ(r.spec->train.data.paths[0], (dir.parent_path() / "data" / "input.txt").string());
  const fs::path cwd = fs::current_path();
  fs::current_path(dir.parent_path());
  FrontendResult from_parent = load_spec_file("specs/r.fsdp");
  fs::current_path(cwd);
  ASSERT_TRUE(from_parent.spec) << from_parent.diagnostics;
  EXPECT_EQ(from_parent.spec->train.data.paths[0], "data/input.txt");
  FrontendResult a = load_spec_file((dir / "a.fsdp").string());
  ASSERT_TRUE(a.spec) << a.diagnostics;
  EXPECT_EQ(a.spec->train.data.paths[0], "/x/train.bin");
  EXPECT_EQ(load_ok(relative).train.data.paths[0], "../data/input.txt");
  // Every file and pattern of a token set and of the validation data too.
  std::ofstream(dir / "v.fsdp") << with_model(
      "train { data = tokens(\"../data/train_*.bin\", \"/abs/more.bin\") val = "
      "tokens(\"val.bin\") }");
  FrontendResult v = load_spec_file((dir / "v.fsdp").string());
  ASSERT_TRUE(v.spec) << v.diagnostics;
  EXPECT_EQ(v.spec->train.data.paths,
            (std::vector<std::string>{(dir.parent_path() / "data" / "train_*.bin").string(),
                                      "/abs/more.bin"}));
  ASSERT_TRUE(v.spec->train.val);
  EXPECT_EQ(v.spec->train.val->paths, std::vector<std::string>{(dir / "val.bin").string()});
}

TEST(Check, LlamaDefaults) {
  Spec s = load_ok(
      "model l { family = llama vocab = 1000 context = 64 width = 96 heads = 6 kv_heads = 2 layers "
      "= 2 }");
  EXPECT_FALSE(s.model.tie_embeddings);
  EXPECT_EQ(s.model.ffn_hidden, 256);  // 8*96/3 = 256, a multiple of 256
  EXPECT_DOUBLE_EQ(s.model.rope_theta, 10000);
}

TEST(Check, Gpt2ParameterCounts) {
  auto params = [](int64_t width, int64_t heads, int64_t layers) {
    return model_params(
        load_ok("model g { vocab = 50257 context = 1024 width = " + std::to_string(width) +
                " heads = " + std::to_string(heads) + " layers = " + std::to_string(layers) + " }")
            .model);
  };
  // The sizes of the released GPT-2 checkpoints (tied embeddings).
  EXPECT_EQ(params(768, 12, 12), 124439808);
  EXPECT_EQ(params(1024, 16, 24), 354823168);
  EXPECT_EQ(params(1280, 20, 36), 774030080);
  EXPECT_EQ(params(1600, 25, 48), 1557611200);
}

TEST(Check, SemanticErrors) {
  EXPECT_NE(load_error("model t { vocab = 256 context = 64 width = 65 heads = 4 layers = 1 }")
                .find("heads (4) must divide width (65)"),
            std::string::npos);
  EXPECT_NE(load_error(with_model("parallel { world = 6 sharding = hybrid_shard shard_group = 4 }"))
                .find("shard_group (4) must divide world (6)"),
            std::string::npos);
  EXPECT_NE(load_error(with_model("parallel { world = 4 shard_group = 2 }"))
                .find("'shard_group' applies only to hybrid sharding"),
            std::string::npos);
  EXPECT_NE(load_error(with_model("parallel { sharding = ful_shard }"))
                .find("unknown sharding strategy 'ful_shard'; did you mean 'full_shard'?"),
            std::string::npos);
  EXPECT_NE(load_error(with_model("parallel { precision { param = bf15 } }"))
                .find("did you mean 'bf16'?"),
            std::string::npos);
  EXPECT_NE(
      load_error(with_model("train { micro_batch = 0 }")).find("'micro_batch' must be positive"),
      std::string::npos);
  EXPECT_NE(load_error(with_model("parallel { accumulate { micro_batches = 0 } }"))
                .find("'micro_batches' must be positive"),
            std::string::npos);
}

// The watchdog's limit: read, printed back only where it is not the default,
// round-tripped, and a located error where it is not a positive number of
// seconds up to a week.
TEST(Check, StallTimeoutIsReadPrintedAndChecked) {
  const Spec s = load_ok(with_model("train { stall_timeout = 2.5 }"));
  EXPECT_DOUBLE_EQ(s.train.stall_timeout, 2.5);
  const std::string printed = print_spec(s);
  EXPECT_NE(printed.find("  stall_timeout = 2.5\n"), std::string::npos) << printed;
  EXPECT_EQ(load_ok(printed).train, s.train);
  EXPECT_DOUBLE_EQ(load_ok(with_model("")).train.stall_timeout, kDefaultStallTimeoutSeconds);
  EXPECT_EQ(print_spec(load_ok(with_model(""))).find("stall_timeout"), std::string::npos);
  for (const char* bad : {"0", "-1", "1e9", "fast"}) {
    const std::string e =
        load_error(with_model(std::string("train { stall_timeout = ") + bad + " }"));
    EXPECT_NE(e.find("stall_timeout"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find(":2:"), std::string::npos) << bad << ": the error is located: " << e;
  }
}

// The loss-spike guard: read, printed back where it is on (or changed),
// round-tripped; none by default and with `guard = none`.
TEST(Check, GuardIsReadPrintedAndRoundTripped) {
  const Spec s = load_ok(with_model("train { guard { loss_z = 4.5  window = 20 } }"));
  EXPECT_DOUBLE_EQ(s.train.guard.loss_z, 4.5);
  EXPECT_DOUBLE_EQ(s.train.guard.norm_z, 0);
  EXPECT_EQ(s.train.guard.window, 20);
  EXPECT_EQ(s.train.guard.max_skips, GuardSpec{}.max_skips);
  const std::string printed = print_spec(s);
  EXPECT_NE(printed.find("  guard { loss_z = 4.5  norm_z = 0  window = 20  max_skips = 5 }\n"),
            std::string::npos)
      << printed;
  EXPECT_EQ(load_ok(printed).train, s.train);
  EXPECT_FALSE(load_ok(with_model("")).train.guard.enabled());
  EXPECT_EQ(print_spec(load_ok(with_model(""))).find("guard"), std::string::npos);
  EXPECT_EQ(load_ok(with_model("train { guard = none }")).train.guard, GuardSpec{});
  const std::string e = load_error(with_model("train { guard { norm_z = 6  max_skips = 0 } }"));
  EXPECT_NE(e.find("'max_skips' must be"), std::string::npos) << e;
}

// muon(...) takes torch.optim.Muon's defaults (lr and weight_decay aside,
// kMuonLr and 0) and its nested adamw AdamW's; each argument lands in its
// field, and the nested adamw's do not touch the outer ones.
TEST(Check, MuonIsReadWithItsDefaults) {
  const OptimizerSpec d = load_ok(with_model("train { optimizer = muon }")).train.optimizer;
  EXPECT_EQ(d.kind, OptimizerKind::Muon);
  EXPECT_DOUBLE_EQ(d.lr, kMuonLr);
  EXPECT_DOUBLE_EQ(d.momentum, 0.95);
  EXPECT_DOUBLE_EQ(d.weight_decay, 0);
  EXPECT_TRUE(d.nesterov);
  EXPECT_EQ(d.ns_steps, 5);
  EXPECT_EQ(d.ns_dtype, DType::FP32);
  EXPECT_EQ(d.adjust_lr, MuonAdjust::Original);
  EXPECT_EQ(d.adamw, AdamWSpec{});
  const OptimizerSpec o =
      load_ok(with_model("train { optimizer = muon(lr = 0.01, ns_steps = 3, adjust_lr = "
                         "match_rms_adamw, adamw = adamw(lr = 2e-3, betas = (0.8, 0.9))) }"))
          .train.optimizer;
  EXPECT_DOUBLE_EQ(o.lr, 0.01);
  EXPECT_EQ(o.ns_steps, 3);
  EXPECT_EQ(o.adjust_lr, MuonAdjust::MatchRmsAdamw);
  EXPECT_DOUBLE_EQ(o.adamw.lr, 2e-3);
  EXPECT_DOUBLE_EQ(o.adamw.beta1, 0.8);
  EXPECT_DOUBLE_EQ(o.adamw.beta2, 0.9);
  EXPECT_DOUBLE_EQ(o.adamw.weight_decay, AdamWSpec{}.weight_decay);
  EXPECT_DOUBLE_EQ(o.beta1, OptimizerSpec{}.beta1) << "the nested betas are the nested adamw's";
}

// min_ratio is the schedule's floor as a fraction of the peak lr: min_lr is
// filled from it and the optimizer's lr (wherever each is written), it prints
// back as written, and it is exclusive with the absolute min.
TEST(Check, MinRatioIsAFractionOfThePeakLr) {
  const std::string text = with_model(
      "train { lr_schedule = cosine(warmup = 2, min_ratio = 0.1)  optimizer = adamw(lr = 2e-3) }");
  const Spec s = load_ok(text);
  ASSERT_TRUE(s.train.lr_schedule.min_ratio);
  EXPECT_DOUBLE_EQ(*s.train.lr_schedule.min_ratio, 0.1);
  EXPECT_DOUBLE_EQ(s.train.lr_schedule.min_lr, 2e-4);
  const std::string printed = print_spec(s);
  EXPECT_NE(printed.find("lr_schedule = cosine(warmup = 2, min_ratio = 0.1)"), std::string::npos)
      << printed;
  EXPECT_EQ(load_ok(printed), s);
  EXPECT_DOUBLE_EQ(load_ok(with_model("train { lr_schedule = linear(warmup = 0, min = 1e-5) }"))
                       .train.lr_schedule.min_lr,
                   1e-5);

  std::string e = load_error(
      with_model("train { lr_schedule = cosine(warmup = 2, min = 1e-4, min_ratio = 0.1) }"));
  EXPECT_NE(e.find("error: 'min' and 'min_ratio' both set the schedule's floor; give one of them"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("note: 'min' is set here"), std::string::npos) << e;
  e = load_error(with_model("train { lr_schedule = cosine(min_ratio = 1.5) }"));
  EXPECT_NE(e.find("min_ratio"), std::string::npos) << e;
  e = load_error(with_model("train { lr_schedule = constant(min_ratio = 0.1) }"));
  EXPECT_NE(e.find("min_ratio"), std::string::npos) << e;
}

// Switching an AdamW spec to muon() keeps its absolute `min` as Muon's
// floor: a warning says both groups' lrs and the min_ratio that keeps them;
// a bare muon() says which lr its nested AdamW got. Written with min_ratio
// and an explicit nested adamw, nothing is said.
TEST(Check, MuonSaysItsGroupsLearningRates) {
  FrontendResult r = load_spec_text(
      "m.fsdp", with_model("train { optimizer = muon()  lr_schedule = cosine(warmup = 2, min = "
                           "1e-4) }"));
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_NE(r.diagnostics.find(
                "warning: 'min' is an absolute lr, the floor of Muon's lr: Muon's matrices train "
                "at lr 0.02 down to 0.0001, the other parameters at 0.0003 down to 1.5e-06 (0.005 "
                "of each peak)"),
            std::string::npos)
      << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("min_ratio = 0.005 keeps these floors"), std::string::npos)
      << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("note: muon() without 'adamw = adamw(...)': the parameters that are "
                               "no Muon matrix (embeddings, head, norms, biases) get adamw()'s "
                               "default lr 0.0003"),
            std::string::npos)
      << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("1 warning generated."), std::string::npos) << r.diagnostics;

  r = load_spec_text("m.fsdp", with_model("train { optimizer = muon  lr_schedule = cosine(warmup "
                                          "= 2, min_ratio = 0.1) }"));
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_EQ(r.diagnostics.find("warning"), std::string::npos) << r.diagnostics;
  EXPECT_NE(r.diagnostics.find("Muon's matrices train at lr 0.02 down to 0.002, the other "
                               "parameters at 0.0003 down to 3e-05 (0.1 of each peak)"),
            std::string::npos)
      << r.diagnostics;

  r = load_spec_text("m.fsdp",
                     with_model("train { optimizer = muon(adamw = adamw(lr = 1e-3))  lr_schedule "
                                "= cosine(warmup = 2, min_ratio = 0.1) }"));
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_EQ(r.diagnostics, "");
  r = load_spec_text("a.fsdp", with_model("train { optimizer = adamw(lr = 1e-3)  lr_schedule = "
                                          "cosine(warmup = 2, min = 1e-4) }"));
  EXPECT_EQ(r.diagnostics, "") << "AdamW's absolute min is what it always was";
}

// Text is bytes: into a model with a tokenizer's vocabulary it is refused
// (data and val), naming token files, unless allow_bytes = true; into a
// vocabulary under 256 always; a byte-level model reads it as ever.
TEST(Check, TextIntoATokenizersVocabularyIsRefusedUnlessAllowed) {
  const std::string gpt2 = "vocab = 50257";
  auto spec = [](const std::string& train, const std::string& vocab) {
    return "model t { " + vocab + " context = 64 width = 64 heads = 4 layers = 4 }\ntrain { " +
           train + " }\n";
  };
  std::string e = load_error(spec("data = text(\"notes.txt\")", gpt2));
  EXPECT_NE(e.find("test.fsdp:2:16: error: text is read as bytes, token ids 0 to 255, but this "
                   "model's vocabulary has 50,257 tokens: it would train on raw bytes, not its "
                   "tokenizer's tokens"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("test.fsdp:1:19: note: vocab is set here"), std::string::npos) << e;
  EXPECT_NE(e.find("tokens(\"train.bin\") (docs/data.md#token-files); or write text(\"...\", "
                   "allow_bytes = true)"),
            std::string::npos)
      << e;
  e = load_error(spec("val = text(\"notes.txt\")", gpt2));
  EXPECT_NE(e.find("vocabulary has 50,257 tokens"), std::string::npos) << e;

  const Spec allowed = load_ok(spec("data = text(\"notes.txt\", allow_bytes = true)", gpt2));
  EXPECT_TRUE(allowed.train.data.allow_bytes);
  const std::string printed = print_spec(allowed);
  EXPECT_NE(printed.find("data = text(\"notes.txt\", allow_bytes = true)"), std::string::npos)
      << printed;
  EXPECT_EQ(load_ok(printed), allowed);
  EXPECT_FALSE(load_ok(spec("data = text(\"notes.txt\")", "vocab = 256")).train.data.allow_bytes);

  e = load_error(spec("data = text(\"notes.txt\", allow_bytes = true)", "vocab = 64"));
  EXPECT_NE(e.find("text is read as bytes, token ids 0 to 255, which do not fit this model's "
                   "vocabulary of 64"),
            std::string::npos)
      << e;
  e = load_error(spec("data = tokens(\"a.bin\", allow_bytes = true)", gpt2));
  EXPECT_NE(e.find("unknown argument 'allow_bytes' of 'tokens'"), std::string::npos) << e;
  e = load_error(spec("data = text(\"a.txt\", allow_bytes = 3)", gpt2));
  EXPECT_NE(e.find("allow_bytes"), std::string::npos) << e;
}

TEST(Check, AllErrorsAreCollectedAndSorted) {
  std::string out = load_error(
      with_model("parallel { sharding = x  world = 0 }\ntrain { steps = -1  bogus = 1 }"));
  EXPECT_NE(out.find("4 errors generated."), std::string::npos) << out;
  size_t a = out.find("unknown sharding strategy"), b = out.find("'world' must be positive");
  size_t c = out.find("'steps' must be positive"), d = out.find("unknown key 'bogus'");
  ASSERT_NE(d, std::string::npos) << out;
  EXPECT_TRUE(a < b && b < c && c < d) << out;
}

// Token data is many files and glob patterns (as arguments or a list), read
// in the order given; validation data and its settings; shuffling is on by
// default. Misuses are located errors.
TEST(Check, TokenSetsValidationAndShuffle) {
  const TrainSpec t = load_ok(with_model("train { data = tokens(\"a_*.bin\", \"b.bin\") val = "
                                         "tokens([\"v1.bin\", \"v2.bin\"]) val_every = 5 "
                                         "val_sequences = 12 }"))
                          .train;
  EXPECT_EQ(t.data.kind, DataKind::Tokens);
  EXPECT_EQ(t.data.paths, (std::vector<std::string>{"a_*.bin", "b.bin"}));
  EXPECT_TRUE(t.shuffle);
  ASSERT_TRUE(t.val);
  EXPECT_EQ(t.val->paths, (std::vector<std::string>{"v1.bin", "v2.bin"}));
  EXPECT_EQ(t.val_every, 5);
  EXPECT_EQ(t.val_sequences, 12);
  EXPECT_FALSE(load_ok(with_model("train { shuffle = false }")).train.shuffle);
  EXPECT_FALSE(load_ok(with_model("train { val = none }")).train.val);
  const Spec synthetic_val = load_ok(with_model("train { val = synthetic(seed = 3) }"));
  ASSERT_TRUE(synthetic_val.train.val);
  EXPECT_EQ(synthetic_val.train.val->seed, 3);
  EXPECT_EQ(synthetic_val.train.val_every, 250);
  EXPECT_EQ(synthetic_val.train.val_sequences, 256);
  // val_every = 0 validates nothing unless a run asks, as the binary's --val-every 0.
  const Spec never = load_ok(with_model("train { val = synthetic(seed = 3) val_every = 0 }"));
  EXPECT_EQ(never.train.val_every, 0);
  EXPECT_NE(print_spec(never).find("val_every = 0"), std::string::npos) << print_spec(never);
  EXPECT_EQ(load_ok(print_spec(never)), never);

  auto error_of = [](const std::string& train) {
    return load_error(with_model("train { " + train + " }"));
  };
  std::string e = error_of("val_every = 10");
  EXPECT_NE(e.find("'val_every' is set but the spec names no validation data"), std::string::npos)
      << e;
  EXPECT_NE(e.find("val = tokens("), std::string::npos) << e;
  e = error_of("data = text(\"a.txt\", \"b.txt\")");
  EXPECT_NE(e.find("text data is one file; 2 paths given"), std::string::npos) << e;
  e = error_of("data = tokens()");
  EXPECT_NE(e.find("data source 'tokens' needs a file"), std::string::npos) << e;
  e = error_of("val = tokens");
  EXPECT_NE(e.find("val = tokens(\"path\")"), std::string::npos) << e;
  e = error_of("data = tokens(files = \"a.bin\")");
  EXPECT_NE(e.find("unknown argument 'files' of 'tokens'"), std::string::npos) << e;
  e = error_of("data = tokens(\"a.bin\", 3)");
  EXPECT_NE(e.find("expected a string for 'path'"), std::string::npos) << e;
  e = error_of("val_sequences = 0 val = synthetic");
  EXPECT_NE(e.find("val_sequences"), std::string::npos) << e;
  e = error_of("shufle = true");
  EXPECT_NE(e.find("did you mean 'shuffle'?"), std::string::npos) << e;
}

// offload takes a block: the parameters' state and the checkpointed
// activations apart; the short form stays the parameters'; both print back.
TEST(Check, OffloadBlockSetsParamsAndActivations) {
  const ParallelSpec p = load_ok(with_model("parallel { recompute = block  offload { params = cpu "
                                            " activations = cpu } }"))
                             .parallel;
  EXPECT_EQ(p.offload, Offload::Cpu);
  EXPECT_TRUE(p.offload_activations);
  const ParallelSpec a =
      load_ok(with_model("parallel { recompute = block  offload { activations = cpu } }")).parallel;
  EXPECT_EQ(a.offload, Offload::None);
  EXPECT_TRUE(a.offload_activations);
  const ParallelSpec c = load_ok(with_model("parallel { offload = cpu }")).parallel;
  EXPECT_EQ(c.offload, Offload::Cpu);
  EXPECT_FALSE(c.offload_activations);
  for (const char* text :
       {"parallel { recompute = block  offload { params = cpu  activations = cpu } }",
        "parallel { recompute = block  offload { activations = cpu } }",
        "parallel { offload = cpu }"}) {
    const Spec spec = load_ok(with_model(text));
    EXPECT_EQ(load_ok(print_spec(spec)), spec) << text;
  }
}

}  // namespace
}  // namespace fsdpgen::test
