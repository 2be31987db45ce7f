// Stalls: a rank stuck in an op (--inject-stall), stopped (SIGSTOP) or
// killed (SIGKILL) ends the job within seconds, never a silent hang: the
// watchdog names the rank, op and step it stuck in, every rank exits with
// the stalled exit code (3), and a dead rank is named as dead.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"
#include "tests/e2e/Stall.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

fs::path stall_binary(int world) {
  E2eConfig c;
  c.world = world;
  return shared_binary(e2e_dir(fmt::format("stall_w{}", world)), c.spec());
}

class InjectedStall : public ::testing::TestWithParam<int> {};

// Rank world-1 sleeps 100 s in its first compute op of step 3: with a 2 s
// timeout the report names it, its op and step within seconds, and every
// rank exits by itself with code 3.
TEST_P(InjectedStall, IsReportedAndEveryRankExits) {
  const int world = GetParam();
  const fs::path bin = own_copy(stall_binary(world), fmt::format("stall_injected_w{}", world));
  const auto [op, label] = first_compute_op(bin);
  ASSERT_GE(op, 0);
  const fs::path watch = watch_root(bin);
  const auto t0 = clock_type::now();
  CmdResult r = run_binary(world, bin,
                           fmt::format("--steps 6 --stall-timeout 2 --inject-stall {}:2:100 "
                                       "--watch-dir {}",
                                       world - 1, watch.string()));
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("%s(%.1f s)\n", r.out.c_str(), seconds);
  EXPECT_EQ(r.status, kStalledExitCode) << r.out;
  EXPECT_LT(seconds, 20) << "the job ends within the timeout and a few seconds, not after the "
                            "100 s sleep";
  EXPECT_EQ(count(r.out, "stall at "), 1) << "one report:\n" << r.out;
  EXPECT_NE(r.out.find(fmt::format("stall at step 3: rank {} has been in op {} ({}: forward, "
                                   "compute stream) for ",
                                   world - 1, op, label)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(fmt::format("for rank {} (stall timeout 2 s)", world - 1)),
            std::string::npos)
      << r.out;
  // Every other rank sees the report claimed and stops by itself (before any
  // rank exits, so that mpirun's teardown cuts no line).
  EXPECT_EQ(count(r.out, "stopping: rank "), world - 1) << r.out;
  EXPECT_TRUE(holds_nothing(watch)) << watch << ": the reporter removes the watch directory";
}

INSTANTIATE_TEST_SUITE_P(Worlds, InjectedStall, ::testing::Values(2, 4));

// The spec's stall_timeout is the binary's limit (no flag given), and
// --stall-timeout overrides it.
TEST(Stall, TheSpecsStallTimeoutIsTheDefault) {
  E2eConfig c;
  c.world = 2;
  c.train_extra = "stall_timeout = 2";
  const fs::path bin =
      own_copy(shared_binary(e2e_dir("stall_spec_timeout_build"), c.spec()), "stall_spec_timeout");
  CmdResult help = run_command(bin.string() + " --help");
  EXPECT_NE(help.out.find("(default: the spec's stall_timeout, 2)"), std::string::npos) << help.out;
  const fs::path watch = watch_root(bin);
  CmdResult r =
      run_binary(2, bin, "--steps 4 --inject-stall 1:1:100 --watch-dir " + watch.string());
  EXPECT_EQ(r.status, kStalledExitCode) << r.out;
  EXPECT_NE(r.out.find("for rank 1 (stall timeout 2 s)"), std::string::npos) << r.out;
  // A longer limit from the flag lets a 3 s pause pass.
  CmdResult flag = run_binary(
      2, bin, "--steps 3 --stall-timeout 30 --inject-stall 1:1:3 --watch-dir " + watch.string());
  EXPECT_EQ(flag.status, 0) << flag.out;
  EXPECT_EQ(flag.out.find("stall at "), std::string::npos) << flag.out;
}

// A stall shorter than the timeout is no stall: the run completes and
// removes its watch directory.
TEST(Stall, AShortPauseIsNotReported) {
  const fs::path bin = own_copy(stall_binary(2), "stall_short_pause");
  const fs::path watch = watch_root(bin);
  CmdResult r = run_binary(
      2, bin, "--steps 4 --stall-timeout 3 --inject-stall 0:1:1 --watch-dir " + watch.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("stall"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << "no allocation in steps:\n"
                                                             << r.out;
  EXPECT_TRUE(holds_nothing(watch)) << watch << ": rank 0 removes the watch directory at the end";
}

// --no-watchdog (for measuring the watchdog's cost): a pause past the stall
// timeout is not reported, the run ends normally, and no watch directory is
// made.
TEST(Stall, NoWatchdogMeansNoReport) {
  const fs::path bin = own_copy(stall_binary(2), "stall_no_watchdog");
  const fs::path watch = watch_root(bin);
  CmdResult r = run_binary(2, bin,
                           "--steps 3 --stall-timeout 1 --inject-stall 1:1:3 --no-watchdog "
                           "--watch-dir " +
                               watch.string());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("stall at"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done: 3 steps"), std::string::npos) << r.out;
  EXPECT_TRUE(holds_nothing(watch)) << watch;
}

TEST(Stall, InjectStallIsChecked) {
  const fs::path bin = stall_binary(2);
  CmdResult r = run_command(bin.string() + " --inject-stall 2:1:5");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--inject-stall: rank 2 is not below the world of 2 ranks"),
            std::string::npos)
      << r.out;
}

// The processes running `bin`, by the rank Open MPI gave each
// (OMPI_COMM_WORLD_RANK in its environment).
std::map<int, pid_t> ranks_running(const fs::path& bin) {
  std::map<int, pid_t> out;
  const fs::path want = fs::canonical(bin);
  const std::string key = "OMPI_COMM_WORLD_RANK=";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (fs::read_symlink(e.path() / "exe", ec) != want || ec) continue;
    std::istringstream env(file_bytes(e.path() / "environ"));
    for (std::string var; std::getline(env, var, '\0');)
      if (var.rfind(key, 0) == 0) out[std::stoi(var.substr(key.size()))] = std::stoi(name);
  }
  return out;
}

// Whether no process runs `bin` any more, allowing a rank torn down with the
// launcher up to 5 s to be reaped.
bool all_ended(const fs::path& bin) {
  const auto t0 = clock_type::now();
  while (!ranks_running(bin).empty() && clock_type::now() - t0 < 5s)
    std::this_thread::sleep_for(50ms);
  return ranks_running(bin).empty();
}

struct signalled_run {
  int status = -1;     // the launcher's exit status (128 + signal), -1: it had to be killed
  double seconds = 0;  // from the signal to the launcher's exit
  pid_t victim = 0;
  std::string out;
};

// Runs the 2-rank binary for (practically) ever, sends rank 1 `sig` once
// two steps are logged, and waits up to 60 s for mpirun to exit.
signalled_run signal_rank_1(const fs::path& bin, int sig) {
  allow_mpi_as_root();
  const fs::path dir = bin.parent_path();
  const fs::path out = dir / fmt::format("signal{}.out", sig);
  const fs::path metrics = dir / fmt::format("signal{}.jsonl", sig);
  fs::remove(metrics);
  const pid_t launcher = fork();
  if (launcher == 0) {
    const std::string line = fmt::format(
        "cd {} && exec {} --steps 1000000 --stall-timeout 2 --metrics {} "
        "--watch-dir {} > {} 2>&1",
        dir.string(), launch(2, bin), metrics.string(), watch_root(bin).string(), out.string());
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  signalled_run s;
  std::map<int, pid_t> ranks;
  const auto started = clock_type::now();
  while (clock_type::now() - started < 60s &&
         (count(file_bytes(metrics), "\n") < 2 || (ranks = ranks_running(bin)).size() < 2))
    std::this_thread::sleep_for(20ms);
  std::this_thread::sleep_for(1500ms);  // the monitors have published a step
  if (ranks.count(1)) {
    s.victim = ranks[1];
    kill(s.victim, sig);
  }
  const auto t0 = clock_type::now();
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0 && clock_type::now() - t0 < 60s)
    std::this_thread::sleep_for(20ms);
  s.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (clock_type::now() - t0 >= 60s) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
    for (const auto& [rank, pid] : ranks_running(bin))
      kill(pid, SIGKILL);
  } else {
    s.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  s.out = file_bytes(out);
  std::printf("%s(%.1f s after the signal)\n", s.out.c_str(), s.seconds);
  return s;
}

// A stopped rank (as a stuck NFS read or a wedged NIC leaves it) stops
// answering: the other rank's watchdog names it and the job ends, the
// stopped process included.
TEST(Stall, AStoppedRankIsReportedAndTheJobEnds) {
  const fs::path bin = own_copy(stall_binary(2), "stall_stopped");
  const signalled_run s = signal_rank_1(bin, SIGSTOP);
  ASSERT_NE(s.victim, 0) << s.out;
  ASSERT_NE(s.status, -1) << "the job did not end within 60 s of SIGSTOP:\n" << s.out;
  EXPECT_LT(s.seconds, 20) << s.out;
  EXPECT_EQ(s.status, kStalledExitCode) << s.out;
  EXPECT_NE(s.out.find(": rank 1 stopped answering "), std::string::npos) << s.out;
  EXPECT_EQ(count(s.out, "stall at step "), 1) << "one report, at a step:\n" << s.out;
  EXPECT_NE(s.out.find(fmt::format("rank 1 (pid {} on ", s.victim)), std::string::npos) << s.out;
  EXPECT_TRUE(all_ended(bin)) << "every rank ended, the stopped one too";
}

// A rank whose checkpoint shard never gets written (a stuck shared file
// system: open() of it never returns) is named as writing its shard, while
// the other waits in the checkpoint's agreement; the job ends with code 3 and
// the checkpoint before stays complete. Written synchronously, the stall is at
// the checkpoint's step; written behind the next steps, at the next
// checkpoint, which waits for the write.
class CheckpointStall : public ::testing::TestWithParam<bool> {};

TEST_P(CheckpointStall, TheRankStuckWritingIsNamed) {
  const bool sync = GetParam();
  // Checkpoints written behind the steps need the spec's checkpoint (its
  // planned staging buffer); --checkpoint-every alone writes them at once.
  E2eConfig c;
  c.train_extra = "  checkpoint(every = 2, dir = \"ck\", keep = 100)\n";
  const fs::path bin = own_copy(shared_binary(e2e_dir("stall_checkpoint"), c.spec()),
                                sync ? "stall_checkpoint_sync" : "stall_checkpoint_async");
  const fs::path dir = bin.parent_path();
  const fs::path lib = failing_io_library(dir);
  fs::remove_all(dir / "ck");
  const auto t0 = clock_type::now();
  allow_mpi_as_root();
  const CmdResult r = run_command(fmt::format(
      "cd {} && FSDPGEN_TEST_HANG_OPEN=step_00000004.partial/shard_00001.bin LD_PRELOAD={} "
      "timeout 60 mpirun -n 2 --oversubscribe --bind-to none {} --steps 6 --stall-timeout 2 "
      "--watch-dir {} {}",
      dir.string(), lib.string(), bin.string(), watch_root(bin).string(),
      sync ? "--checkpoint-sync" : ""));
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  EXPECT_EQ(r.status, kStalledExitCode) << r.out;
  EXPECT_LT(seconds, 30) << r.out;
  EXPECT_NE(r.out.find(fmt::format("stall at step {}: rank 1 has been in writing its checkpoint "
                                   "shard after the step for ",
                                   sync ? 4 : 6)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("rank 0 waits in the checkpoint's agreement after the step (every rank's "
                       "shard written)"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000002" / "manifest.json")) << r.out;
  EXPECT_FALSE(fs::exists(dir / "ck" / "step_00000004")) << r.out;
}

INSTANTIATE_TEST_SUITE_P(Writes, CheckpointStall, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Sync" : "Behind";
                         });

// A killed rank: Open MPI's mpirun ends the job at once and names it.
TEST(Stall, AKilledRankEndsTheJobAndIsNamed) {
  const fs::path bin = own_copy(stall_binary(2), "stall_killed");
  const signalled_run s = signal_rank_1(bin, SIGKILL);
  ASSERT_NE(s.victim, 0) << s.out;
  ASSERT_NE(s.status, -1) << "the job did not end within 60 s of SIGKILL:\n" << s.out;
  EXPECT_LT(s.seconds, 20) << s.out;
  EXPECT_NE(s.status, 0) << s.out;
  // Open MPI 4 names the rank (its PID as 0); the watchdog, if first, the pid.
  EXPECT_TRUE(std::regex_search(
      s.out,
      std::regex(fmt::format(
          R"(process rank 1 with PID \d+ on node \S+ exited on signal 9|rank 1 \(pid {}\) is dead)",
          s.victim))))
      << s.out;
  EXPECT_TRUE(all_ended(bin)) << "every rank ended";
}

}  // namespace
}  // namespace fsdpgen::test
