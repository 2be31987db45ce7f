// Validation: the loss a training binary reports on held-out data (the
// plan's validation pass: the step's gathers and micro-batch 0's forward,
// no gradients) is the mean cross-entropy of the weights it holds, computed
// here again in double from the weights it saved; it is the same at every
// strategy, accumulation and world size; it runs at val_every, at
// checkpoints and at the end; and validation data that cannot serve is
// refused on every rank; and it never reads a sequence that training reads,
// as the binary's --trace-data shows, at every world size and after resumes
// on others.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/e2e/E2e.h"
#include "tests/runtime/Reference.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

constexpr int kT = 16, kC = 32, kH = 2, kF = 128, kV = 64, kLayers = 3;

// Validation over 7 sequences: not a multiple of any world x micro-batch
// below, so the last pass counts only some of its rows.
E2eConfig validated(int world = 2) {
  E2eConfig c;
  c.world = world;
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 2\n  val_sequences = 7\n";
  return c;
}

// Every F32 tensor of a safetensors file, by name.
std::map<std::string, ref::vec> read_f32_tensors(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::map<std::string, ref::vec> out;
  const nlohmann::json tensors = nlohmann::json::parse(header);
  for (const auto& [name, t] : tensors.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t.at("dtype"), "F32") << name;
    const size_t begin = t.at("data_offsets")[0], end = t.at("data_offsets")[1];
    std::vector<float> f((end - begin) / 4);
    std::memcpy(f.data(), data.data() + begin, end - begin);
    out[name] = ref::vec(f.begin(), f.end());
  }
  return out;
}

// The mean per-token loss of the saved GPT-2 over the first `count` windows
// of `tokens` (window j: tokens [jT, jT + T + 1)), in double.
double reference_val_loss(const fs::path& weights, const std::vector<int32_t>& tokens, int count) {
  std::map<std::string, ref::vec> w = read_f32_tensors(weights);
  const ref::dims d{1, kT, kC, kH, kF, kV};
  double sum = 0;
  for (int j = 0; j < count; ++j) {
    const std::vector<int32_t> in(tokens.begin() + j * kT, tokens.begin() + j * kT + kT);
    const std::vector<int32_t> target(tokens.begin() + j * kT + 1,
                                      tokens.begin() + j * kT + kT + 1);
    ref::vec x =
        ref::encoder(in, w["transformer.wte.weight"], w["transformer.wpe.weight"], 1, kT, kC);
    for (int l = 0; l < kLayers; ++l) {
      ref::block_params p;
      for (const ref::named_tensor& t : ref::block_tensors())
        p.*t.member = w[fmt::format("transformer.h.{}.{}", l, t.name)];
      x = ref::block(x, p, d);
    }
    sum += ref::head_loss(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"],
                          w["transformer.wte.weight"], target, d);
  }
  return sum / (count * kT);
}

// The "val loss" lines of a run's log, by step.
std::map<int, double> val_losses(const std::string& log) {
  std::map<int, double> out;
  static const std::regex line(R"(step +(\d+)/\d+ \| val loss ([0-9.]+) \| (\d+) sequences)");
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
    out[std::stoi((*it)[1])] = std::stod((*it)[2]);
  return out;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

// The validation loss after training is the weights' own: the loss of the
// saved weights on the same sequences, computed here in double, within fp32
// rounding (relative 1e-6; measured 1.6e-9).
TEST(Validation, EqualsAnIndependentForwardOfTheSavedWeights) {
  const fs::path dir = e2e_dir("validation_reference");
  const E2eConfig c = validated();
  const fs::path bin = build_binary(dir, c.spec());
  std::mt19937 rng(11);
  std::vector<int32_t> tokens(12 * kT + 1);
  for (int32_t& t : tokens)
    t = static_cast<int32_t>(rng() % kV);
  write_token_file(dir / "val.bin", tokens);
  CmdResult r =
      run_binary(c.world, bin, "--steps 4 --val val.bin --metrics m.jsonl --save w.safetensors");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("val: tokens"), std::string::npos) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(dir / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m[0].contains("val_loss"));
  ASSERT_TRUE(m[1].contains("val_loss")) << m[1];
  EXPECT_FALSE(m[2].contains("val_loss"));
  ASSERT_TRUE(m[3].contains("val_loss")) << m[3];
  const double got = m[3]["val_loss"].get<double>();
  const double want = reference_val_loss(dir / "w.safetensors", tokens, 7);
  std::printf("validation loss: binary %.9g, double reference %.9g, relative %.2g\n", got, want,
              relative(got, want));
  EXPECT_LT(relative(got, want), 1e-6) << "binary " << got << ", reference " << want;
  // Two steps earlier the weights differed, and so did the loss.
  EXPECT_GT(relative(m[1]["val_loss"].get<double>(), want), 1e-4);
  // The log says the same.
  EXPECT_NEAR(val_losses(r.out).at(4), got, 1e-6) << r.out;
}

// The same weights give the same validation loss at every strategy,
// accumulation, recompute, offload and world size (fp32, relative 1e-6): a
// run with no step to train evaluates the weights it was given.
TEST(Validation, SameAtEveryStrategyAndWorldSize) {
  const E2eConfig base = validated(1);
  const fs::path first = shared_binary(e2e_dir("validation_strategies_w1"), base.spec());
  ASSERT_EQ(run_binary(1, first, "--steps 3 --save w.safetensors").status, 0);
  const fs::path weights = first.parent_path() / "w.safetensors";
  std::vector<E2eConfig> configs;
  for (const char* sharding : {"full_shard", "shard_grad_op", "no_shard"}) {
    E2eConfig c = validated(2);
    c.sharding = sharding;
    configs.push_back(c);
  }
  E2eConfig hybrid = validated(4);
  hybrid.sharding = "hybrid_shard";
  hybrid.shard_group = 2;
  configs.push_back(hybrid);
  E2eConfig accumulate = validated(2);
  accumulate.micro_batches = 2;
  accumulate.micro_batch = 3;
  accumulate.recompute = "block";
  configs.push_back(accumulate);
  E2eConfig offload = validated(2);
  offload.offload = "cpu";
  configs.push_back(offload);
  E2eConfig offload_acts = validated(2);  // the pass copies saved inputs to the host too
  offload_acts.recompute = "block";
  offload_acts.offload_activations = true;
  configs.push_back(offload_acts);
  configs.push_back(base);
  double want = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    const E2eConfig& c = configs[i];
    const fs::path bin = shared_binary(e2e_dir("validation_" + c.name()), c.spec());
    CmdResult r = run_binary(c.world, bin, "--steps 0 --init-from " + weights.string());
    ASSERT_EQ(r.status, 0) << c.name() << "\n" << r.out;
    const std::map<int, double> v = val_losses(r.out);
    ASSERT_EQ(v.size(), 1u) << c.name() << "\n" << r.out;
    if (i == 0) want = v.begin()->second;
    std::printf("%s: val loss %.6f\n", c.name().c_str(), v.begin()->second);
    EXPECT_LT(relative(v.begin()->second, want), 1e-6) << c.name() << "\n" << r.out;
  }
}

// Validation runs every val_every steps, at every checkpoint and at the end,
// and --val-every 0 turns it off; the summary gives the last.
TEST(Validation, RunsAtItsStepsCheckpointsAndTheEnd) {
  const fs::path dir = e2e_dir("validation_when");
  E2eConfig c = validated();
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 3\n  val_sequences = 5\n";
  const fs::path bin = shared_binary(dir, c.spec());
  CmdResult r = run_binary(c.world, bin,
                           "--steps 7 --checkpoint-every 5 --checkpoint-dir ck --metrics m.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<int> steps;
  for (const auto& [step, loss] : val_losses(r.out))
    steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int>{3, 5, 6, 7})) << r.out;
  EXPECT_NE(r.out.find("| val loss "), std::string::npos) << r.out;
  std::vector<int> with_val;
  for (const nlohmann::json& m : read_metrics(dir / "m.jsonl"))
    if (m.contains("val_loss")) with_val.push_back(m["step"].get<int>());
  EXPECT_EQ(with_val, steps);
  CmdResult off = run_binary(c.world, bin, "--steps 3 --val-every 0");
  ASSERT_EQ(off.status, 0) << off.out;
  EXPECT_TRUE(val_losses(off.out).empty()) << off.out;
}

// A spec's val_every = 0 is the flag's 0: its validation data is named but
// read only where --val-every asks.
TEST(Validation, ASpecsValEveryZeroValidatesOnlyWhereTheFlagAsks) {
  E2eConfig c = validated();
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 0\n  val_sequences = 5\n";
  const fs::path bin = shared_binary(e2e_dir("validation_every_zero"), c.spec());
  CmdResult never = run_binary(c.world, bin, "--steps 3 --checkpoint-every 2 --checkpoint-dir ck");
  ASSERT_EQ(never.status, 0) << never.out;
  EXPECT_TRUE(val_losses(never.out).empty()) << never.out;
  CmdResult asked = run_binary(c.world, bin, "--steps 3 --val-every 2");
  ASSERT_EQ(asked.status, 0) << asked.out;
  std::vector<int> steps;
  for (const auto& [step, loss] : val_losses(asked.out))
    steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int>{2, 3})) << asked.out;
}

// A validation set shorter than val_sequences is read whole, with a note
// (its mean loss over all 3 sequences: 3 sequences of one token repeated);
// --val-every where the spec names no validation data is refused before
// the first step, on every rank.
TEST(Validation, AShortValidationSetIsReadWholeAndMissingDataRefused) {
  const fs::path dir = e2e_dir("validation_refused");
  const E2eConfig c = validated();
  const fs::path bin = shared_binary(dir, c.spec());
  write_token_file(dir / "short.bin", std::vector<int32_t>(3 * kT + 1, 5));
  CmdResult r = run_binary(c.world, bin, "--steps 2 --val short.bin");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("note: val: tokens short.bin"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": fewer than the 7 sequences of val_sequences; each validation reads all "
                       "3\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("val loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| 3 sequences in"), std::string::npos) << r.out;
  E2eConfig plain;
  const fs::path plain_bin = shared_binary(e2e_dir("validation_refused_plain"), plain.spec());
  CmdResult no_val = run_binary(2, plain_bin, "--steps 2 --val-every 5");
  EXPECT_NE(no_val.status, 0) << no_val.out;
  EXPECT_NE(no_val.out.find("--val-every 5: the spec names no validation data"), std::string::npos)
      << no_val.out;
}

// One line of a --trace-data file (runtime/train/data.h data_trace): a sequence a
// rank read, training or validating.
struct sequence_read {
  std::string pass;  // train or val
  int64_t index = 0, rank = 0, micro = 0, sequence = 0;
  std::string hash;  // FNV-1a 64 of its T + 1 token ids
  int64_t offset = 0;
  std::string source;  // synthetic(seed=S), or the file holding the window's first token
  std::string line;
};

std::vector<sequence_read> read_data_trace(const fs::path& p) {
  std::vector<sequence_read> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) {
    sequence_read r;
    std::istringstream fields(line);
    fields >> r.pass >> r.index >> r.rank >> r.micro >> r.sequence >> r.hash >> r.offset >> std::ws;
    std::getline(fields, r.source);
    EXPECT_TRUE((r.pass == "train" || r.pass == "val") && !fields.fail() && !r.source.empty())
        << p << ": " << line;
    r.line = line;
    out.push_back(r);
  }
  return out;
}

// FNV-1a 64 of token ids as int32 little-endian bytes, in 16 hex digits (as
// data_trace writes it).
std::string fnv1a64_of_ids(const int32_t* ids, int64_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b)
      h = (h ^ ((static_cast<uint32_t>(ids[i]) >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

// What contradicts "validation read nothing training read": a window (a
// source and offset) or, for token files, the same T + 1 tokens read by both;
// also a line whose hash is not that of the tokens at its offset in the file
// the test wrote (`files`: path -> tokens), or a window read with two
// different hashes. Empty when all holds.
std::vector<std::string> validation_overlaps(
    const std::vector<sequence_read>& reads,
    const std::map<std::string, std::vector<int32_t>>& files) {
  std::vector<std::string> problems;
  std::map<std::pair<std::string, int64_t>, std::string> train_windows, hashes;
  std::set<std::string> train_token_hashes;
  for (const sequence_read& r : reads) {
    const auto window = std::make_pair(r.source, r.offset);
    if (auto [at, fresh] = hashes.emplace(window, r.hash); !fresh && at->second != r.hash)
      problems.push_back(fmt::format("{} read with hash {} and {}", r.line, at->second, r.hash));
    if (const auto file = files.find(r.source); file != files.end()) {
      const std::vector<int32_t>& tokens = file->second;
      if (r.offset < 0 || r.offset + kT + 1 > static_cast<int64_t>(tokens.size()))
        problems.push_back(fmt::format("{}: offset outside {}", r.line, r.source));
      else if (fnv1a64_of_ids(tokens.data() + r.offset, kT + 1) != r.hash)
        problems.push_back(fmt::format("{}: not the hash of the tokens at that offset", r.line));
    } else if (r.source.rfind("synthetic(", 0) != 0) {
      problems.push_back(fmt::format("{}: a file the test did not write", r.line));
    }
    if (r.pass != "train") continue;
    train_windows.emplace(window, r.line);
    if (files.count(r.source)) train_token_hashes.insert(r.hash);
  }
  for (const sequence_read& r : reads) {
    if (r.pass != "val") continue;
    if (const auto t = train_windows.find({r.source, r.offset}); t != train_windows.end())
      problems.push_back(
          fmt::format("validation read [{}], training read [{}]", r.line, t->second));
    else if (files.count(r.source) && train_token_hashes.count(r.hash))
      problems.push_back(fmt::format("validation read [{}]: tokens training read", r.line));
  }
  return problems;
}

// How many lines of a pass each rank wrote.
std::map<int64_t, int64_t> lines_per_rank(const std::vector<sequence_read>& reads,
                                          const std::string& pass) {
  std::map<int64_t, int64_t> out;
  for (const sequence_read& r : reads)
    out[r.rank] += r.pass == pass;
  return out;
}

// The validated binaries: world 1, 2 (micro-batch 2), hybrid 2 x 2
// (micro-batch 2: a global batch of 8) and world 4 with micro-batch 1 (the
// global batch of 4 that world 2 has). The first three are those of
// SameAtEveryStrategyAndWorldSize, built once for both.
struct validated_binary {
  E2eConfig config;
  fs::path path;
};

std::vector<validated_binary> validated_binaries() {
  E2eConfig hybrid = validated(4);
  hybrid.sharding = "hybrid_shard";
  hybrid.shard_group = 2;
  E2eConfig world4 = validated(4);
  world4.micro_batch = 1;
  std::vector<validated_binary> out;
  for (const E2eConfig& c : {validated(1), validated(2), hybrid, world4})
    out.push_back({c, shared_binary(e2e_dir("validation_" + c.name()), c.spec())});
  return out;
}

// Runs `b` with args and --trace-data trace (appended to), expecting success
// and no allocation by fsdpgen in a step; returns the output.
std::string traced_run(const validated_binary& b, const fs::path& trace, const std::string& args) {
  CmdResult r =
      run_binary(b.config.world, b.path, fmt::format("{} --trace-data {}", args, trace.string()));
  EXPECT_EQ(r.status, 0) << b.config.name() << "\n" << r.out;
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << r.out;
  return r.out;
}

// Every run's validation reads are disjoint from its training reads: fresh
// at worlds 1, 2, hybrid 2 x 2 and 4, and resumed from a world-2 checkpoint
// at worlds 4 (the same global batch), 1 and hybrid 2 x 2 (both with
// --allow-batch-change), where the run is the checkpoint's steps and the
// resumed ones. `data`: the data flags of every run; `files`: the token
// files they name (path -> tokens). Validation reads its 7 sequences every
// 2 steps, in passes of world x micro-batch.
void expect_validation_disjoint(const std::string& name, const std::string& data,
                                const std::map<std::string, std::vector<int32_t>>& files) {
  const std::vector<validated_binary> bins = validated_binaries();
  const fs::path work = e2e_dir("validation_disjoint_" + name);
  const fs::path ck = work / "ck";
  fs::remove_all(ck);
  for (const validated_binary& b : bins) {
    const fs::path trace = work / fmt::format("{}.trace", b.config.name());
    fs::remove(trace);
    const bool checkpointed = b.config.world == 2;
    traced_run(b, trace,
               fmt::format("--steps 4 {}{}", data,
                           checkpointed ? " --checkpoint-every 2 --checkpoint-dir " + ck.string()
                                        : std::string()));
    const std::vector<sequence_read> reads = read_data_trace(trace);
    const int64_t world = b.config.world, B = b.config.micro_batch;
    const int64_t passes = (7 + world * B - 1) / (world * B);
    for (int64_t rank = 0; rank < world; ++rank) {
      EXPECT_EQ(lines_per_rank(reads, "train")[rank], 4 * B) << b.config.name() << " rank " << rank;
      EXPECT_EQ(lines_per_rank(reads, "val")[rank], 2 * passes * B)
          << b.config.name() << " rank " << rank;
    }
    EXPECT_EQ(validation_overlaps(reads, files), std::vector<std::string>{}) << b.config.name();
  }
  const fs::path step2 = ck / "step_00000002";
  ASSERT_TRUE(fs::exists(step2 / "manifest.json"));
  const std::vector<sequence_read> checkpointed =
      read_data_trace(work / fmt::format("{}.trace", bins[1].config.name()));
  for (const validated_binary& b : bins) {
    if (b.config.world == 2) continue;
    const fs::path trace = work / fmt::format("resumed_{}.trace", b.config.name());
    fs::remove(trace);
    const bool same_batch = b.config.world * b.config.micro_batch == 4;
    const std::string out =
        traced_run(b, trace,
                   fmt::format("--resume {} --steps 6 --checkpoint-every 0{}", step2.string(),
                               same_batch ? "" : " --allow-batch-change"));
    EXPECT_EQ(val_losses(out).count(6), 1u) << out;
    std::vector<sequence_read> reads = read_data_trace(trace);
    EXPECT_EQ(lines_per_rank(reads, "train")[0], 4 * b.config.micro_batch) << b.config.name();
    reads.insert(reads.end(), checkpointed.begin(), checkpointed.end());
    EXPECT_EQ(validation_overlaps(reads, files), std::vector<std::string>{})
        << "resumed on " << b.config.name();
  }
}

// Synthetic validation data (the spec's val = synthetic(seed = 7), the
// training stream's own seed) is that stream's held-out sequences.
TEST(Validation, NeverReadsASyntheticSequenceTrainingReads) {
  expect_validation_disjoint("synthetic", "", {});
}

// Token files: training on 20 windows (in a shuffled order, wrapping into a
// second epoch), validating on another file's first 7. The test of the test:
// validating on the training file itself is caught, and warned of.
TEST(Validation, NeverReadsATokenWindowTrainingReads) {
  const fs::path work = e2e_dir("validation_disjoint_tokens");
  const fs::path train = work / "train.bin", val = work / "val.bin";
  const std::vector<int32_t> train_tokens = random_token_ids(20 * kT + 1, kV, 21);
  const std::vector<int32_t> val_tokens = random_token_ids(12 * kT + 1, kV, 22);
  write_token_file(train, train_tokens);
  write_token_file(val, val_tokens);
  const std::map<std::string, std::vector<int32_t>> files = {{train.string(), train_tokens},
                                                             {val.string(), val_tokens}};
  expect_validation_disjoint(
      "tokens", fmt::format("--data {} --val {}", train.string(), val.string()), files);

  const validated_binary world2 = validated_binaries()[1];
  const fs::path trace = work / "same_file.trace";
  fs::remove(trace);
  const std::string out = traced_run(
      world2, trace, fmt::format("--steps 4 --data {} --val {}", train.string(), train.string()));
  const std::vector<std::string> caught = validation_overlaps(read_data_trace(trace), files);
  EXPECT_FALSE(caught.empty()) << "validating on the training file went unnoticed";
  // ... by the test, and by the binary, which says so once.
  EXPECT_NE(out.find(fmt::format("warning: val: {} is also a training file: validation reads "
                                 "sequences the run trains on",
                                 train.string())),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace fsdpgen::test
