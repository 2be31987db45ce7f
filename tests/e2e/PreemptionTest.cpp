// Preemption: SIGUSR1 (forwarded by mpirun; Slurm sends it with
// --signal), SIGTERM (to a rank, or to a binary that re-launched itself) or
// SIGINT (Ctrl-C) stops every rank after the same step with a checkpoint,
// saying which signal arrived, and the command
// the stop prints (--resume and nothing else) continues as if the run had
// never stopped.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// A spec whose learning rate does not depend on the number of steps, so that
// a run of many steps stopped at step N trains its first N steps as a run of
// N + 3 steps does.
std::string constant_lr_spec(const E2eConfig& c) {
  std::string spec = c.spec();
  const std::string cosine = "cosine(warmup = 1, min = 1e-3)";
  spec.replace(spec.find(cosine), cosine.size(), "constant(warmup = 1)");
  return spec;
}

// Starts `cmd` in dir (no shell left between: the pid is the command's).
pid_t start(const fs::path& dir, const std::string& cmd) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string line = fmt::format("cd {} && exec {} > run.out 2>&1", dir.string(), cmd);
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits up to `limit` for pid; kills it (and fails) after that. Returns its status.
int wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "the run did not stop within " << limit.count() << " s";
      return -1;
    }
    std::this_thread::sleep_for(50ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Lines of a file another process is appending to.
int complete_lines(const fs::path& p) {
  std::ifstream in(p);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// The pid of the rank `rank` of the binary `bin` running in `dir` (its
// working directory), found by its Open MPI environment; -1 if none runs.
pid_t pid_of_rank(const fs::path& dir, const fs::path& bin, int rank) {
  const std::string want = fmt::format("OMPI_COMM_WORLD_RANK={}", rank);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (fs::read_symlink(e.path() / "exe", ec) != fs::canonical(bin) || ec) continue;
    if (fs::read_symlink(e.path() / "cwd", ec) != fs::canonical(dir) || ec) continue;
    std::ifstream in(e.path() / "environ");
    std::string var;
    while (std::getline(in, var, '\0'))
      if (var == want) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Runs `world` ranks for (practically) ever, signals them (or only the rank
// `only_rank`) once 3 steps are logged, and checks the stop (naming the
// signal the ranks received: `arrived`), the checkpoint (in ckpt_dir, given
// with --checkpoint-dir unless it is the spec's "ckpt") and the run resumed
// with the command the stop names.
void expect_stop_and_resume(const std::string& name, int world, int sig, const std::string& arrived,
                            const std::string& ckpt_dir, bool started_alone = false,
                            int only_rank = -1) {
  allow_mpi_as_root();
  E2eConfig c;
  c.world = world;
  const fs::path dir = e2e_dir(name);
  fs::remove_all(dir / ckpt_dir);
  fs::remove(dir / "stopped.jsonl");
  fs::remove(dir / "never.safetensors");
  const fs::path bin = shared_binary(dir, constant_lr_spec(c));
  const pid_t pid =
      start(dir, fmt::format("{} --steps 1000000 --metrics stopped.jsonl "
                             "--checkpoint-every 0 --save never.safetensors{}",
                             started_alone ? bin.string() : launch(world, bin),
                             ckpt_dir == "ckpt" ? "" : " --checkpoint-dir " + ckpt_dir));
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (complete_lines(dir / "stopped.jsonl") < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  const pid_t target = only_rank < 0 ? pid : pid_of_rank(dir, bin, only_rank);
  if (target < 0) ADD_FAILURE() << "no process of rank " << only_rank << " found";
  kill(target < 0 ? pid : target, sig);
  const int status = wait_for(pid, 120s);
  std::ifstream log(dir / "run.out");
  const std::string out{std::istreambuf_iterator<char>(log), {}};
  EXPECT_EQ(status, 0) << out;

  const std::vector<double> stopped = read_losses(dir / "stopped.jsonl");
  const int64_t n = static_cast<int64_t>(stopped.size());
  ASSERT_GE(n, 3) << out;
  ASSERT_LT(n, 1000000) << out;
  // A signal mpirun forwards to every rank may reach one a step before the
  // others (measured once in CI on a loaded machine: "SIGUSR1 (1 of 2 ranks
  // had received it)"); the stop then names how many ranks had it.
  const std::string stopped_line =
      fmt::format("stopped after step {} of 1000000: asked to by {}", n, arrived);
  const bool forwarded = world > 1 && only_rank < 0 && arrived.find('(') == std::string::npos;
  EXPECT_TRUE(
      out.find(stopped_line + "; ") != std::string::npos ||
      (forwarded &&
       std::regex_search(
           out, std::regex(stopped_line +
                           fmt::format(R"( \([1-9]\d* of {} ranks had received it\); )", world)))))
      << out;
  EXPECT_NE(out.find("not writing never.safetensors"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dir / "never.safetensors"));
  // The command the stop prints needs nothing else: the binary started as
  // this run was, and the checkpoint directory.
  const std::string command = fmt::format(
      "{}{} --resume {}", world > 1 && !started_alone ? fmt::format("mpirun -n {} ", world) : "",
      bin.string(), ckpt_dir);
  EXPECT_NE(out.find("continue with: " + command + "\n"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(dir / ckpt_dir / fmt::format("step_{:08}", n) / "manifest.json")) << out;

  // The same N + 3 steps straight, and the stopped run resumed by that
  // command to N + 3: it keeps the launched run's metrics file, appending.
  CmdResult straight =
      run_binary(world, bin, fmt::format("--steps {} --metrics straight.jsonl", n + 3));
  ASSERT_EQ(straight.status, 0) << straight.out;
  CmdResult resumed =
      run_command(fmt::format("cd {} && timeout 300 {} --steps {}", dir.string(), command, n + 3));
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find(fmt::format("warning: --steps {}: the run was launched for 1000000 "
                                         "steps; the lr schedule now ends at step {}",
                                         n + 3, n + 3)),
            std::string::npos)
      << resumed.out;
  const std::vector<double> a = read_losses(dir / "straight.jsonl");
  const std::vector<double> b = read_losses(dir / "stopped.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(n + 3));
  ASSERT_EQ(b.size(), static_cast<size_t>(n + 3)) << resumed.out;
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(b[i], a[i]) << "step " << i + 1 << (i < static_cast<size_t>(n) ? "" : ", resumed");
  EXPECT_TRUE(fs::exists(dir / "never.safetensors")) << "the launched run's --save, at its end";
  fs::remove(dir / "never.safetensors");
}

TEST(Preemption, Sigusr1StopsEveryRankWithACheckpoint) {
  expect_stop_and_resume("preempt_usr1", 2, SIGUSR1, "SIGUSR1", "pre");
}

// A signal that reaches one rank only (as one sent to every rank may reach
// them at slightly different times) stops every rank after the same step,
// and rank 0, which did not receive it, names it and how many ranks had.
TEST(Preemption, ASignalToOneRankStopsEveryRankAndIsNamed) {
  expect_stop_and_resume("preempt_one_rank", 2, SIGUSR1, "SIGUSR1 (1 of 2 ranks had received it)",
                         "pre", false, 1);
}

TEST(Preemption, SigtermStopsASingleRankWithACheckpoint) {
  expect_stop_and_resume("preempt_term", 1, SIGTERM, "SIGTERM", "ckpt");
}

// Ctrl-C (SIGINT) stops a run like a preemption, and says so; a second one
// would end the process at once.
TEST(Preemption, SigintStopsASingleRankWithACheckpoint) {
  expect_stop_and_resume("preempt_int", 1, SIGINT, "SIGINT (Ctrl-C)", "ckpt");
}

// Started alone for world 2, the binary runs mpirun as its child: a SIGTERM to
// the process the user started reaches the ranks as a SIGUSR1 (a SIGTERM to
// mpirun would kill them, exit 1), and the job exits 0 with a checkpoint.
TEST(Preemption, SigtermToABinaryThatRelaunchedItselfStopsEveryRankWithACheckpoint) {
  expect_stop_and_resume("preempt_term_alone", 2, SIGTERM, "SIGUSR1", "ckpt", true);
}

// --resume-if-exists, the one command of a job a scheduler requeues: with no
// checkpoint it starts afresh (--seed applies), with one it resumes from the
// newest (a note says --seed is not used) and trains on bit for bit; with
// --resume it is refused.
TEST(Preemption, ResumeIfExistsStartsAfreshThenResumes) {
  E2eConfig c;
  c.world = 2;
  const fs::path dir = e2e_dir("resume_if_exists");
  fs::remove_all(dir / "ck");
  fs::remove(dir / "job.jsonl");
  const fs::path bin = shared_binary(dir, constant_lr_spec(c));
  const std::string job =
      "--steps 6 --checkpoint-every 3 --checkpoint-dir ck --resume-if-exists --metrics job.jsonl";
  CmdResult first = run_binary(2, bin, job + " --seed 1337");
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_NE(first.out.find("--resume-if-exists: no checkpoint in ck, so the run starts afresh\n"),
            std::string::npos)
      << first.out;
  const std::vector<double> straight = read_losses(dir / "job.jsonl");
  ASSERT_EQ(straight.size(), 6u) << first.out;
  CmdResult other_seed = run_binary(2, bin, "--steps 6 --seed 5 --metrics seed5.jsonl");
  ASSERT_EQ(other_seed.status, 0) << other_seed.out;
  EXPECT_NE(read_losses(dir / "seed5.jsonl")[0], straight[0]) << "--seed did not apply";

  // As if preempted after step 3: the newest checkpoint is step 3's.
  fs::remove_all(dir / "ck" / "step_00000006");
  ASSERT_TRUE(fs::exists(dir / "ck" / "step_00000003" / "manifest.json"));
  CmdResult again = run_binary(2, bin, job + " --seed 5");
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_NE(again.out.find("note: --resume-if-exists resumes from the checkpoint in ck, which "
                           "holds the weights and the seed: --init-from and --seed are not used"),
            std::string::npos)
      << again.out;
  const std::vector<double> resumed = read_losses(dir / "job.jsonl");
  ASSERT_EQ(resumed.size(), 6u) << again.out;
  for (size_t i = 0; i < straight.size(); ++i)
    EXPECT_EQ(resumed[i], straight[i]) << "step " << i + 1;

  CmdResult both = run_binary(2, bin, "--resume ck --resume-if-exists");
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_NE(both.out.find("error: --resume excludes --resume-if-exists"), std::string::npos)
      << both.out;
}

}  // namespace
}  // namespace fsdpgen::test
