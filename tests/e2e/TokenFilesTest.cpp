// TokenFiles: training binaries reading llm.c token files at scale: a set of
// files named by glob patterns or a list is one token stream (split anywhere,
// it trains exactly as one file); GPT-2 (uint16) and Llama 3 (uint32) files
// read alike; a shuffled epoch wraps into the next with a line in the log; and
// every kind of bad token set stops every rank before or at the batch that
// meets it, naming the file, never a crash or a hang.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

constexpr int kT = 16, kVocab = 64;

// A work directory of its own, emptied, holding the shared binary of c.
struct Work {
  fs::path dir;
  fs::path bin;
};
Work work(const std::string& name, const E2eConfig& c) {
  const fs::path bin = shared_binary(e2e_dir("tokens_bin_" + name), c.spec());
  const fs::path dir = e2e_dir("tokens_" + name);
  for (const auto& entry : fs::directory_iterator(dir))
    fs::remove_all(entry.path());
  return {dir, bin};
}

// Writes tokens split into files dir/name_0.bin, ... at the given token offsets.
void write_split(const fs::path& dir, const std::string& name, const std::vector<int32_t>& tokens,
                 const std::vector<size_t>& cuts, token_format f = token_format::gpt2) {
  size_t from = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t to = i < cuts.size() ? cuts[i] : tokens.size();
    write_token_file(dir / fmt::format("{}_{}.bin", name, i),
                     std::vector<int32_t>(tokens.begin() + static_cast<ptrdiff_t>(from),
                                          tokens.begin() + static_cast<ptrdiff_t>(to)),
                     f);
    from = to;
  }
}

CmdResult run_in(const Work& w, int world, const std::string& args) {
  allow_mpi_as_root();
  return run_command(
      fmt::format("cd {} && timeout 300 {} {}", w.dir.string(), launch(world, w.bin), args));
}

bool has(const CmdResult& r, const std::string& part) {
  return r.out.find(part) != std::string::npos;
}

// The same tokens split into 3 files (cut inside windows, so that windows
// span the files) train exactly as one file, whether named by a glob or a
// list, and in uint32 Llama 3 files as in uint16 GPT-2 ones (shuffle off).
TEST(TokenFiles, ASplitSetTrainsExactlyAsOneFile) {
  E2eConfig c;
  c.steps = 5;
  const Work w = work("split", c);
  const std::vector<int32_t> tokens = random_token_ids(40 * kT + 1, kVocab, 3);
  write_token_file(w.dir / "whole.bin", tokens);
  write_split(w.dir, "part", tokens, {37, 300});
  write_split(w.dir, "wide", tokens, {129, 130}, token_format::llama3);
  auto losses = [&](const std::string& data, const std::string& metrics) {
    CmdResult r =
        run_in(w, c.world, fmt::format("--shuffle false --data {} --metrics {}", data, metrics));
    EXPECT_EQ(r.status, 0) << data << "\n" << r.out;
    return read_losses(w.dir / metrics);
  };
  const std::vector<double> one = losses("whole.bin", "one.jsonl");
  ASSERT_EQ(one.size(), 5u);
  EXPECT_EQ(losses("'part_*.bin'", "glob.jsonl"), one);
  EXPECT_EQ(losses("part_0.bin part_1.bin part_2.bin", "list.jsonl"), one);
  EXPECT_EQ(losses("'wide_*.bin'", "wide.jsonl"), one);
  CmdResult banner = run_in(w, c.world, "--steps 1 --shuffle false --data 'part_*.bin'");
  EXPECT_TRUE(has(banner, "part_*.bin: 3 files, 641 tokens (uint16), 40 sequences of 16"))
      << banner.out;
}

// Shuffled, each epoch reads every sequence once in its own order: with 20
// windows and 4 sequences a step, step 6 begins the second epoch, which the
// log says; a seed repeats the run and shuffling changes the losses.
TEST(TokenFiles, ShuffledEpochsWrapAndRepeat) {
  E2eConfig c;
  c.steps = 7;
  const Work w = work("epochs", c);
  write_split(w.dir, "part", random_token_ids(20 * kT + 1, kVocab, 5), {100});
  auto run = [&](const std::string& args, const std::string& metrics) {
    CmdResult r =
        run_in(w, c.world, fmt::format("--data 'part_*.bin' --metrics {} {}", metrics, args));
    EXPECT_EQ(r.status, 0) << r.out;
    return r;
  };
  CmdResult first = run("", "a.jsonl");
  EXPECT_TRUE(has(first, "shuffled")) << first.out;
  EXPECT_TRUE(has(first, "epoch 1 from sequence 0 of it, 1.4 epochs this run")) << first.out;
  EXPECT_TRUE(has(first, "data: epoch 2 begins within step 6")) << first.out;
  run("", "b.jsonl");
  run("--shuffle false", "ordered.jsonl");
  EXPECT_EQ(read_losses(w.dir / "a.jsonl"), read_losses(w.dir / "b.jsonl"));
  EXPECT_NE(read_losses(w.dir / "a.jsonl"), read_losses(w.dir / "ordered.jsonl"));
  std::vector<int> epochs;
  for (const nlohmann::json& m : read_metrics(w.dir / "a.jsonl"))
    epochs.push_back(m.at("epoch").get<int>());
  EXPECT_EQ(epochs, (std::vector<int>{0, 0, 0, 0, 0, 1, 1}));
}

// Every rank stops with the finder's message (exit 1 on each, nothing hangs).
void expect_stopped(const CmdResult& r, const std::vector<std::string>& parts) {
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.status, 124) << "timed out:\n" << r.out;
  for (const std::string& p : parts)
    EXPECT_TRUE(has(r, p)) << "missing \"" << p << "\" in:\n" << r.out;
}

// Bad token sets are refused before the first step, naming the file: a glob
// that matches nothing, a truncated file, a file of another version than the
// rest, a mix of uint16 and uint32 files, a text file named .bin.
TEST(TokenFiles, BadSetsAreRefusedNamingTheFile) {
  E2eConfig c;
  const Work w = work("bad", c);
  const std::vector<int32_t> tokens = random_token_ids(10 * kT + 1, kVocab, 9);
  expect_stopped(run_in(w, c.world, "--data 'nothing_*.bin'"), {"nothing_*.bin", "no file"});

  write_split(w.dir, "cut", tokens, {80});
  fs::resize_file(w.dir / "cut_1.bin", fs::file_size(w.dir / "cut_1.bin") - 3);
  expect_stopped(run_in(w, c.world, "--data 'cut_*.bin'"), {"cut_1.bin"});

  write_split(w.dir, "mixed", tokens, {80});
  write_token_file(w.dir / "mixed_1.bin", tokens, token_format::llama3);
  expect_stopped(run_in(w, c.world, "--data 'mixed_*.bin'"), {"mixed_1.bin"});

  write_split(w.dir, "version", tokens, {80});
  {
    std::fstream f(w.dir / "version_1.bin", std::ios::in | std::ios::out | std::ios::binary);
    const int32_t v = 2;
    f.seekp(4);
    f.write(reinterpret_cast<const char*>(&v), 4);
  }
  expect_stopped(run_in(w, c.world, "--data 'version_*.bin'"), {"version_1.bin", "version 2"});

  std::ofstream(w.dir / "notes.bin") << "these are notes, not tokens\n";
  expect_stopped(run_in(w, c.world, "--data notes.bin"),
                 {"notes.bin", "a .bin file is read as an llm.c token file"});
  const CmdResult none = run_in(w, c.world, "--data 'cut_*.bin' 'nothing_*.bin'");
  expect_stopped(none, {"nothing_*.bin"});
  EXPECT_FALSE(has(none, "step 1/")) << none.out;
}

// A token id >= vocab deep in the set is found when the batch holding it is
// filled: the run trains up to that step and every rank stops, the one that
// read it naming the file and the byte offset.
TEST(TokenFiles, ATokenIdBeyondTheVocabStopsEveryRankAtItsBatch) {
  E2eConfig c;
  c.steps = 6;
  const Work w = work("beyond_vocab", c);
  std::vector<int32_t> tokens = random_token_ids(40 * kT + 1, kVocab, 13);
  // Step 3 (0-based 2) reads windows 8..11 in order: window 10 is rank 1's.
  tokens[10 * kT + 5] = kVocab + 1;
  write_split(w.dir, "part", tokens, {100});
  const CmdResult r = run_in(w, c.world, "--shuffle false --data 'part_*.bin'");
  const int64_t offset = 1024 + 2 * (10 * kT + 5 - 100);
  expect_stopped(r, {fmt::format("part_1.bin: token at byte offset {} is {}, not < vocab {}",
                                 offset, kVocab + 1, kVocab),
                     "rank 1: error"});
  EXPECT_TRUE(has(r, "step 2/6")) << r.out;
  EXPECT_FALSE(has(r, "step 3/6 | loss")) << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
