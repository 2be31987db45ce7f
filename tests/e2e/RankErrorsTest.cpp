// RankErrors: a job whose ranks fail together says each error once. When
// every rank fails the same way (a bad flag, a refused resume, a missing
// file) one line says it and every rank exits with the code docs/binary.md
// gives, with no MPI_Abort; when ranks differ, each distinct message is said
// once with the ranks that hit it (ranks given different flags by mpirun's
// MPMD form: `-n 1 ./train --data a : -n 2 ./train --data b`).
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

// How many times `what` occurs in `text`.
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// The same output said once: one "error:" line, no MPI_Abort.
void expect_said_once(const CmdResult& r, int status, const std::string& message) {
  EXPECT_EQ(r.status, status) << r.out;
  EXPECT_EQ(count_of(r.out, "error:"), 1) << r.out;
  EXPECT_EQ(count_of(r.out, "error: " + message), 1) << r.out;
  EXPECT_EQ(r.out.find("MPI_ABORT"), std::string::npos) << r.out;
}

std::filesystem::path world4_binary() {
  E2eConfig c;
  c.world = 4;
  return shared_binary(e2e_dir("rank_errors_w4"), c.spec());
}

// mpirun's MPMD form: each part's rank count and flags, run in bin's directory.
CmdResult run_parts(const std::filesystem::path& bin,
                    const std::vector<std::pair<int, std::string>>& parts) {
  std::string command;
  for (const auto& [ranks, flags] : parts)
    command +=
        fmt::format("{}-n {} {} {}", command.empty() ? "" : " : ", ranks, bin.string(), flags);
  allow_mpi_as_root();
  return run_command(fmt::format("cd {} && timeout 120 mpirun --oversubscribe --bind-to none {}",
                                 bin.parent_path().string(), command));
}

// The case: the global-batch refusal of a world-2 checkpoint resumed
// at world 4 was printed by each of the 4 ranks.
TEST(RankErrors, AWorld4RefusalIsSaidOnce) {
  E2eConfig two;  // world 2: a global batch of 4 sequences, the world-4 binary's is 8
  const std::filesystem::path written = shared_binary(e2e_dir("rank_errors_w2"), two.spec());
  const std::filesystem::path ck = written.parent_path() / "ck";
  std::filesystem::remove_all(ck);
  CmdResult saved = run_binary(2, written, "--steps 1 --checkpoint-every 1 --checkpoint-dir ck");
  ASSERT_EQ(saved.status, 0) << saved.out;

  const std::filesystem::path bin = world4_binary();
  CmdResult refused = run_binary(4, bin, "--resume " + (ck / "step_00000001").string());
  expect_said_once(refused, 1, (ck / "step_00000001").string() + ": ");
  EXPECT_NE(refused.out.find("--allow-batch-change"), std::string::npos) << refused.out;
  EXPECT_EQ(refused.out.find("step 1/"), std::string::npos) << "trained:\n" << refused.out;
}

TEST(RankErrors, AWorld4BadFlagOrMissingFileIsSaidOnce) {
  const std::filesystem::path bin = world4_binary();
  expect_said_once(run_binary(4, bin, "--steps 5x"), 2,
                   "--steps: expected a whole number >= 0, got '5x'");
  expect_said_once(run_binary(4, bin, "--data /nonexistent/input.txt"), 1,
                   "/nonexistent/input.txt");
}

TEST(RankErrors, RanksThatDifferSayEachMessageOnceWithTheirRanks) {
  const std::filesystem::path bin = world4_binary();
  CmdResult data = run_parts(bin, {{1, "--data /nonexistent/a.txt"},
                                   {2, "--data /nonexistent/b.txt"},
                                   {1, "--data /nonexistent/a.txt"}});
  EXPECT_EQ(data.status, 1) << data.out;
  EXPECT_EQ(count_of(data.out, "error:"), 2) << data.out;
  EXPECT_EQ(count_of(data.out, "ranks 0, 3: error: /nonexistent/a.txt"), 1) << data.out;
  EXPECT_EQ(count_of(data.out, "ranks 1-2: error: /nonexistent/b.txt"), 1) << data.out;
  EXPECT_EQ(data.out.find("MPI_ABORT"), std::string::npos) << data.out;

  // Ranks 2 and 3, whose flags are good, agree with the others and stop too.
  CmdResult flags = run_parts(bin, {{1, "--steps 5x"}, {1, "--step 5"}, {2, "--steps 1"}});
  EXPECT_EQ(flags.status, 2) << flags.out;
  EXPECT_EQ(count_of(flags.out, "error:"), 2) << flags.out;
  EXPECT_EQ(count_of(flags.out, "rank 0: error: --steps: expected a whole number"), 1) << flags.out;
  EXPECT_EQ(count_of(flags.out, "rank 1: error: unknown flag --step; did you mean --steps?"), 1)
      << flags.out;
  EXPECT_EQ(flags.out.find("step 1/1"), std::string::npos) << "trained:\n" << flags.out;
}

}  // namespace
}  // namespace fsdpgen::test
