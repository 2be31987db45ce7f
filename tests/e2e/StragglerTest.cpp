// Stragglers: every --straggler-every steps the metrics name the busiest rank
// and the op kind where it lost most against the median rank; a rank made to
// sleep 0.3 s in its first forward op of that step (--inject-stall) is named,
// with forward, and logged. --straggler-every 0 writes nothing; a negative
// value is refused; `fsdpgen compare --ranks` sets the two ranks of a
// measured trace side by side.
#include <filesystem>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

// The stall tests' binary (world 2), copied into this test's own directory.
fs::path straggler_binary(const std::string& name) {
  const fs::path built = shared_binary(e2e_dir("stall_w2"), E2eConfig().spec());
  const fs::path dir = e2e_dir(name);
  fs::copy_file(built, dir / "train", fs::copy_options::overwrite_existing);
  fs::remove_all(dir / "watch");
  fs::create_directories(dir / "watch");
  return dir / "train";
}

// `steps` steps, rank 1 sleeping 0.3 s in step 2 (1-based), with --metrics.
std::string run_args(const fs::path& bin, int steps, const std::string& more) {
  return fmt::format("--steps {} --inject-stall 1:1:0.3 --metrics {} --watch-dir {} {}", steps,
                     (bin.parent_path() / "m.jsonl").string(),
                     (bin.parent_path() / "watch").string(), more);
}

TEST(Straggler, ASleepingRankIsNamedWithTheOpKindItSleptIn) {
  const fs::path bin = straggler_binary("straggler_named");
  CmdResult r = run_binary(2, bin, run_args(bin, 4, "--straggler-every 2"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
  ASSERT_EQ(m.size(), 4u);
  // Steps 2 and 4 (1-based) are measured; rank 1 slept in step 2.
  EXPECT_FALSE(m[0].contains("straggler")) << m[0];
  EXPECT_FALSE(m[2].contains("straggler")) << m[2];
  ASSERT_TRUE(m[3].contains("straggler")) << m[3];
  ASSERT_TRUE(m[1].contains("straggler")) << m[1];
  const nlohmann::json& s = m[1]["straggler"];
  EXPECT_EQ(s["rank"], 1) << s;
  EXPECT_EQ(s["median_rank"], 0) << s;
  EXPECT_EQ(s["op_kind"], "forward") << s;
  EXPECT_GE(s["busy_s"].get<double>(), 0.3) << s;
  EXPECT_GT(s["lost_s"].get<double>(), 0.25) << s;
  EXPECT_LT(s["median_busy_s"].get<double>(), s["busy_s"].get<double>() - 0.25) << s;
  EXPECT_GE(s["step_s"].get<double>(), s["busy_s"].get<double>()) << s;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(\nstraggler at step 2: rank 1 busy \d+\.\d ms against \d+\.\d ms on )"
                 R"(the median rank \(0\), \d+\.\d\dx; most of it in forward \(\+\d+\.\d ms\)\n)")))
      << r.out;
}

// 100 steps: the default (100) would measure the last.
TEST(Straggler, EveryZeroWritesNothingAndANegativeValueIsRefused) {
  const fs::path bin = straggler_binary("straggler_off");
  CmdResult r = run_binary(2, bin, run_args(bin, 100, "--straggler-every 0"));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
  ASSERT_EQ(m.size(), 100u);
  for (const nlohmann::json& line : m)
    EXPECT_FALSE(line.contains("straggler")) << line;
  EXPECT_EQ(r.out.find("straggler"), std::string::npos) << r.out;
  CmdResult bad = run_command(bin.string() + " --straggler-every -1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--straggler-every: expected a whole number >= 0, got -1"),
            std::string::npos)
      << bad.out;
}

// The traced step of a two-rank run holds both ranks: compare --ranks 0,1
// shows rank 1's forward ops 0.3 s longer than rank 0's.
TEST(Straggler, CompareSetsTheTwoRanksOfAMeasuredTraceSideBySide) {
  const fs::path bin = straggler_binary("straggler_compare");
  const fs::path trace = bin.parent_path() / "t.json";
  CmdResult r =
      run_binary(2, bin, run_args(bin, 4, "--trace " + trace.string() + " --trace-step 1"));
  ASSERT_EQ(r.status, 0) << r.out;
  CmdResult c = run_command(fmt::format("{} compare {} --ranks 0,1", FSDPGEN_BIN, trace.string()));
  ASSERT_EQ(c.status, 0) << c.out;
  std::smatch f;
  ASSERT_TRUE(std::regex_search(c.out, f, std::regex(R"(\nF \(\d+\) +([0-9.]+) +([0-9.]+) )")))
      << c.out;
  EXPECT_GT(std::stod(f[2]) - std::stod(f[1]), 250) << c.out;  // ms
}

}  // namespace
}  // namespace fsdpgen::test
