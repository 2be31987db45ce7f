// fsdpgen tune from the command line: the table's shape, the spec's own
// rank, -o round-tripping through check --dump, the numerics kept unless
// --allow-numerics (and marked), exit codes and bad flags.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/cli/CliHelpers.h"
#include "tests/common/Command.h"

namespace {

using fsdpgen::test::CmdResult;
using fsdpgen::test::file_bytes;
using fsdpgen::test::fresh_dir;
using fsdpgen::test::has;
using fsdpgen::test::run;
using fsdpgen::test::spec;

// Rows of the ranked table: "    1      150.9 ..." (a '*' marks the spec's own).
int ranked_rows(const std::string& out) {
  static const std::regex row(R"(\n +(\*|\*?[0-9]+) +[0-9.]+ +[0-9]+ +[0-9.]+% )");
  return static_cast<int>(
      std::distance(std::sregex_iterator(out.begin(), out.end(), row), std::sregex_iterator()));
}

TEST(CliTune, TinyTableAndOwnRank) {
  CmdResult r = run("tune " + spec("tiny.fsdp") + " --gpu cpu --top 4");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "tune of tiny on 2 x cpu")) << r.out;
  EXPECT_TRUE(has(r, "figures: built-in figures for 'cpu'")) << r.out;
  EXPECT_TRUE(has(r, "global batch: 16 sequences")) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("[0-9]+ candidates: [0-9]+ planned in full")))
      << r.out;
  EXPECT_TRUE(has(r, "the 4 fastest that fit:")) << r.out;
  EXPECT_TRUE(has(r, "rank     step ms   tok/s/GPU     MFU")) << r.out;
  EXPECT_EQ(ranked_rows(r.out), 4 + (has(r, "the spec as written (*) ranks") ? 0 : 1)) << r.out;
  EXPECT_TRUE(has(r, "the spec as written (*)")) << r.out;
  EXPECT_TRUE(has(r, "Pareto front")) << r.out;
}

TEST(CliTune, Gpt2XlOnEightA100sDropsRecompute) {
  const std::string dir = fresh_dir("cli-tune-gpt2-1.5b");
  CmdResult r = run("tune " + spec("gpt2-1.5b.fsdp") + " --world 8 --gpu a100-40g --top 3 -o " +
                    dir + "/tuned.fsdp --keep prefetch");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(ranked_rows(r.out), 3 + 1) << r.out;  // the top 3 and the spec's own row
  EXPECT_TRUE(has(r, "recompute = none")) << r.out;
  EXPECT_TRUE(has(r, "is not in the top 3; the winner is")) << r.out;
  EXPECT_TRUE(has(r, "kept as written: prefetch")) << r.out;
  EXPECT_TRUE(has(r, "wrote " + dir + "/tuned.fsdp")) << r.out;
  // The written spec keeps the comments and reads back; check --dump round-trips it.
  const std::string tuned = file_bytes(dir + "/tuned.fsdp");
  EXPECT_NE(tuned.find("# gpt2-1.5b: GPT-2 XL"), std::string::npos) << tuned;
  EXPECT_NE(tuned.find("recompute = none"), std::string::npos) << tuned;
  CmdResult dump = run("check --dump " + dir + "/tuned.fsdp");
  ASSERT_EQ(dump.status, 0) << dump.out;
  {
    std::ofstream f(dir + "/dumped.fsdp");
    f << dump.out.substr(dump.out.find('\n') + 1);
  }
  CmdResult again = run("check --dump " + dir + "/dumped.fsdp");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_EQ(again.out.substr(again.out.find('\n') + 1), dump.out.substr(dump.out.find('\n') + 1));
  // Tuning the tuned spec finds it first.
  CmdResult twice =
      run("tune " + dir + "/tuned.fsdp --world 8 --gpu a100-40g --top 3 --keep prefetch");
  ASSERT_EQ(twice.status, 0) << twice.out;
  EXPECT_TRUE(has(twice, "the spec as written (*) ranks 1 of the 3")) << twice.out;
}

// Llama 3 8B without its checkpoints: their staging copy (12 B per parameter
// over the world, in the host arena) leaves no CPU world up to 64 that fits
// with the spec's numerics; a bf16 reduce (--allow-numerics) fits at 64.
TEST(CliTune, NothingFitsExitsFourNamingTheWorld) {
  const std::string dir = fresh_dir("cli-tune-nothing-fits");
  {
    std::ifstream in(spec("llama3-8b.fsdp"));
    std::ofstream out(dir + "/llama3-8b.fsdp");
    for (std::string line; std::getline(in, line);)
      if (line.find("checkpoint(") == std::string::npos) out << line << "\n";
  }
  const std::string args =
      "tune " + dir + "/llama3-8b.fsdp --world 1 --gpu cpu --keep units prefetch";
  CmdResult r = run(args);
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_TRUE(has(r, "nothing fits on 1 x cpu")) << r.out;
  EXPECT_TRUE(has(r, "lacks")) << r.out;
  EXPECT_TRUE(has(r,
                  "nothing fits up to 64 ranks either (the global batch and the numerics "
                  "kept); a larger device, or a smaller model or batch (--allow-batch-change) "
                  "or other numerics (--allow-numerics) is needed"))
      << r.out;
  r = run(args + " --allow-numerics");
  EXPECT_EQ(r.status, 4) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("the smallest world that fits: [0-9]+ ranks")))
      << r.out;
}

TEST(CliTune, BadFlagsAreNamed) {
  CmdResult r = run("tune " + spec("tiny.fsdp") + " --keep prefech");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "--keep prefech: no such knob (did you mean 'prefetch'?)")) << r.out;
  r = run("tune " + spec("tiny.fsdp") + " --worlds 2,x");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "--worlds 2,x: 'x' is not a world size")) << r.out;
  r = run("tune " + spec("tiny.fsdp") + " --worlds 2 --world 4");
  EXPECT_EQ(r.status, 2) << r.out;
  r = run("tune " + spec("tiny.fsdp") + " --top 0");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "--top 0: must be at least 1")) << r.out;
  r = run("tune " + spec("tiny.fsdp") + " --gpu a100");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "unknown hardware 'a100'")) << r.out;
  r = run("tune " + spec("tiny.fsdp") + " --world 0");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "--world 0")) << r.out;
}

// A profile calibrate measured here is used and named on the figures line;
// one from another device (a CPU's measurements claiming a GPU's figures),
// a file that is not JSON, or a profile beside --gpu is refused naming it.
TEST(CliTune, AProfileIsUsedAndAForeignOrBrokenOneRefused) {
  const std::string dir = fresh_dir("tune_profiles");
  CmdResult cal =
      run("calibrate " + spec("tiny.fsdp") + " --target cpu --quick -o " + dir + "/good.json");
  ASSERT_EQ(cal.status, 0) << cal.out;
  CmdResult good = run("tune " + spec("tiny.fsdp") + " --hardware " + dir + "/good.json --top 2");
  ASSERT_EQ(good.status, 0) << good.out;
  EXPECT_TRUE(has(good, "figures: hardware profile " + dir + "/good.json (")) << good.out;
  EXPECT_TRUE(has(good, "ops measured")) << good.out;

  std::string text = file_bytes(dir + "/good.json");
  const size_t base = text.find("\"base\": \"cpu\"");
  ASSERT_NE(base, std::string::npos) << text.substr(0, 400);
  text.replace(base, std::string("\"base\": \"cpu\"").size(), "\"base\": \"h100-sxm\"");
  std::ofstream(dir + "/foreign.json") << text;
  CmdResult foreign = run("tune " + spec("tiny.fsdp") + " --hardware " + dir + "/foreign.json");
  EXPECT_EQ(foreign.status, 2) << foreign.out;
  EXPECT_TRUE(has(foreign, dir + "/foreign.json: device.base: 'h100-sxm' is a GPU, but the "
                                 "profile measured the cpu runtime"))
      << foreign.out;

  std::ofstream(dir + "/broken.json") << "{";
  CmdResult broken = run("tune " + spec("tiny.fsdp") + " --hardware " + dir + "/broken.json");
  EXPECT_EQ(broken.status, 2) << broken.out;
  EXPECT_TRUE(has(broken, dir + "/broken.json: not JSON")) << broken.out;

  CmdResult both =
      run("tune " + spec("tiny.fsdp") + " --hardware " + dir + "/good.json --gpu h100-sxm");
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_TRUE(has(both, "not --gpu h100-sxm; give one of them")) << both.out;
}

// --write-candidates: every planned candidate that fits, as specs ranked
// fastest first (the first is what -o writes), listed with their predicted
// steps; the spec as written is among them, marked.
TEST(CliTune, WritesEveryFittingCandidateRanked) {
  const std::string dir = fresh_dir("tune_candidates");
  CmdResult r = run("tune " + spec("tiny.fsdp") + " --gpu cpu --top 3 --min-gain 0 -o " + dir +
                    "/tuned.fsdp --write-candidates " + dir + "/all");
  ASSERT_EQ(r.status, 0) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("wrote ([0-9]+) candidates that fit to ")))
      << r.out;
  const int n = std::stoi(m[1]);
  EXPECT_GE(n, 3) << r.out;
  EXPECT_EQ(file_bytes(dir + "/all/candidate_001.fsdp"), file_bytes(dir + "/tuned.fsdp"));
  std::istringstream index(file_bytes(dir + "/all/candidates.tsv"));
  std::string line;
  std::getline(index, line);
  EXPECT_EQ(line, "file\trank\tpredicted_step_ms\ttokens_per_s_per_gpu\town\tchanges");
  int rows = 0, own = 0;
  double last_ms = 0;
  while (std::getline(index, line)) {
    ++rows;
    std::istringstream fields(line);
    std::string file, rank, ms, tps, mine;
    std::getline(fields, file, '\t');
    std::getline(fields, rank, '\t');
    std::getline(fields, ms, '\t');
    std::getline(fields, tps, '\t');
    std::getline(fields, mine, '\t');
    EXPECT_EQ(rank, std::to_string(rows)) << line;
    EXPECT_TRUE(std::filesystem::exists(dir + "/all/" + file)) << file;
    EXPECT_GE(std::stod(ms), last_ms) << line << ": ranked by predicted time per token";
    last_ms = std::stod(ms);
    own += mine == "yes";
  }
  EXPECT_EQ(rows, n);
  EXPECT_EQ(own, 1) << "the spec as written fits and is listed once";
}

// -o keeps the spec as written when the fastest is predicted less than
// --min-gain percent faster (tiny's winner: about 2% on the built-in CPU
// figures), and writes the winner when the gain is over it.
TEST(CliTune, ASmallPredictedGainKeepsTheSpecAsWritten) {
  const std::string dir = fresh_dir("tune_min_gain");
  CmdResult kept = run("tune " + spec("tiny.fsdp") + " --gpu cpu -o " + dir + "/kept.fsdp");
  ASSERT_EQ(kept.status, 0) << kept.out;
  EXPECT_TRUE(std::regex_search(
      kept.out, std::regex("unchanged: the fastest \\(.*\\) is predicted only [0-9.]+% faster, "
                           "under --min-gain 5% \\(within the cost model's error\\)")))
      << kept.out;
  EXPECT_EQ(file_bytes(dir + "/kept.fsdp"), file_bytes(spec("tiny.fsdp")));
  CmdResult moved =
      run("tune " + spec("tiny.fsdp") + " --gpu cpu --min-gain 0.5 -o " + dir + "/moved.fsdp");
  ASSERT_EQ(moved.status, 0) << moved.out;
  EXPECT_TRUE(std::regex_search(moved.out, std::regex("with .*\\(predicted [0-9.]+% faster\\)")))
      << moved.out;
  EXPECT_NE(file_bytes(dir + "/moved.fsdp"), file_bytes(spec("tiny.fsdp")));
  CmdResult bad = run("tune " + spec("tiny.fsdp") + " --min-gain -1");
  EXPECT_EQ(bad.status, 2) << bad.out;
}

// Llama 3 8B on 8 H100s (spec: bf16 params, fp32 reduce): by default no
// row changes a dtype and the winner -o writes keeps the spec's precision;
// --allow-numerics brings back the bf16 reduce, each such row marked, and
// the winner written says so.
TEST(CliTune, Llama3On8H100sKeepsTheNumericsUnlessAllowed) {
  const std::string dir = fresh_dir("cli-tune-numerics");
  const std::string precision = "precision { param = bf16  reduce = fp32  master = fp32 }";
  const std::string args = "tune " + spec("llama3-8b.fsdp") + " --world 8 --gpu h100-sxm --top 5";
  CmdResult kept = run(args + " -o " + dir + "/kept.fsdp");
  ASSERT_EQ(kept.status, 0) << kept.out;
  EXPECT_TRUE(std::regex_search(
      kept.out, std::regex("numerics: the spec's in every candidate \\(param bf16, reduce fp32, "
                           "master fp32\\); [0-9]+ that change them not searched "
                           "\\(--allow-numerics\\)")))
      << kept.out;
  EXPECT_FALSE(has(kept, "precision")) << kept.out;
  EXPECT_FALSE(has(kept, "[numerics:")) << kept.out;
  // What the figures are worth: the H100's measured range, and links never measured.
  EXPECT_TRUE(has(kept,
                  "measured error: the built-in 'h100-sxm' figures: a measured step took "
                  "1.30-1.51x the predicted time"))
      << kept.out;
  EXPECT_TRUE(has(kept, "communication between GPUs")) << kept.out;
  EXPECT_TRUE(has(kept, "expect: a real step 1.30-1.51x the predicted one")) << kept.out;
  EXPECT_TRUE(has(kept, "wrote " + dir + "/kept.fsdp")) << kept.out;
  EXPECT_NE(file_bytes(dir + "/kept.fsdp").find(precision), std::string::npos)
      << file_bytes(dir + "/kept.fsdp");

  CmdResult allowed = run(args + " --allow-numerics -o " + dir + "/allowed.fsdp");
  ASSERT_EQ(allowed.status, 0) << allowed.out;
  EXPECT_TRUE(has(allowed, "numerics: may change (--allow-numerics)")) << allowed.out;
  static const std::regex marked(
      R"(\n +\*?[0-9]+ +[0-9.]+ +[0-9]+ +[0-9.]+% .*precision reduce = bf16.* \[numerics: reduce dtype bf16, not fp32\])");
  EXPECT_TRUE(std::regex_search(allowed.out, marked)) << allowed.out;
  // Every row that changes the reduce dtype is marked.
  std::istringstream lines(allowed.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("precision reduce =") != std::string::npos) {
      EXPECT_NE(line.find("[numerics: reduce dtype"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(std::regex_search(
      allowed.out, std::regex("wrote .*/allowed.fsdp: .* \\[numerics: reduce dtype bf16, not "
                              "fp32\\] \\(predicted [0-9.]+% faster\\)")))
      << allowed.out;
}

TEST(CliTune, WorldsSweepNamesSkippedWorlds) {
  CmdResult r = run("tune " + spec("tiny.fsdp") + " --gpu cpu --worlds 1,2,3 --top 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "tune of tiny on {1,2,3} x cpu")) << r.out;
  EXPECT_TRUE(has(r, "note: world 3: ranks_per_node 2 does not divide it")) << r.out;
}

}  // namespace
