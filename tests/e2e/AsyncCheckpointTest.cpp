// Asynchronous checkpoints (a spec with checkpoint(every = N)): each is
// copied into the plan's host staging buffer at the step boundary and written
// behind the next steps. Its files are byte for byte those --checkpoint-sync
// writes (also when its writes are slowed so that the next steps run during
// them), a run resumed from it continues bit-exactly, a run that dies while
// one is still pending keeps the checkpoints completed before (the pending
// one stays .partial, which resume ignores), a stop signal completes the
// pending one and writes its own, and the log and metrics report each
// checkpoint step's stall.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <regex>
#include <thread>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kStalledExitCode = 3;  // runtime/train/watchdog.h

// Checkpoints every 2 steps into "ck", keeping all of them.
E2eConfig checkpointed(int steps) {
  E2eConfig c;
  c.steps = steps;
  c.train_extra = "  checkpoint(every = 2, dir = \"ck\", keep = 100)\n";
  return c;
}

// The binary of c (shared by the tests of its step count), copied into its own empty work directory
// `name`: runs there write ck/ and their outputs apart from every other test's.
fs::path own_binary(const E2eConfig& c, const std::string& name) {
  const fs::path shared =
      shared_binary(e2e_dir(fmt::format("async_checkpoint_bin_{}", c.steps)), c.spec());
  const fs::path dir = fs::path(FSDPGEN_E2E_WORK) / ("async_checkpoint_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(shared, dir / "train");
  return dir / "train";
}

bool has(const CmdResult& r, const std::string& part) {
  return r.out.find(part) != std::string::npos;
}

CmdResult train(const fs::path& bin, const std::string& args) {
  CmdResult r = run_binary(2, bin, args);
  EXPECT_EQ(r.status, 0) << r.out;
  return r;
}

// Whole lines of a file another process is appending to.
size_t complete_lines(const fs::path& p) {
  const std::string text = file_bytes(p);
  return static_cast<size_t>(std::count(text.begin(), text.end(), '\n'));
}

// The regular files of a checkpoint directory, by name.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    out[e.path().filename().string()] = file_bytes(e.path());
  return out;
}

// Async and --checkpoint-sync runs write the same files; the async run's log
// says each checkpoint was written behind the next steps and what its step
// stalled, its metrics carry checkpoint_stall_s on exactly the checkpoint
// steps; a run resumed from an async checkpoint continues bit-exactly.
TEST(AsyncCheckpoint, FilesAreTheSyncOnesAndResumeIsBitExact) {
  const E2eConfig c = checkpointed(6);
  const fs::path async_bin = own_binary(c, "async"), sync_bin = own_binary(c, "sync");
  const fs::path a = async_bin.parent_path(), s = sync_bin.parent_path();
  const std::string args = "--metrics m.jsonl --save final.safetensors";
  const CmdResult async_run = train(async_bin, args);
  const CmdResult sync_run = train(sync_bin, args + " --checkpoint-sync");
  EXPECT_TRUE(has(async_run,
                  "(newest 100 kept), written behind the next steps from the plan's "
                  "host staging buffer ("))
      << async_run.out;
  EXPECT_TRUE(has(sync_run, "(newest 100 kept), written before the next step\n")) << sync_run.out;
  for (int step : {2, 4}) {
    EXPECT_TRUE(
        has(async_run, fmt::format("checkpoint: step {} written to ck/step_{:08} (", step, step)))
        << async_run.out;
    const std::regex line(fmt::format(
        R"(checkpoint: step {} written to ck/step_{:08} \([0-9.]+ MiB in [0-9.]+ s behind the next )"
        R"(steps; staged in [0-9.]+ s, the step stalled [0-9.]+ s\)\n)",
        step, step));
    EXPECT_TRUE(std::regex_search(async_run.out, line)) << async_run.out;
  }
  // The last is written at once: nothing follows it to hide behind.
  EXPECT_TRUE(has(async_run, "checkpoint: step 6 written to ck/step_00000006 (")) << async_run.out;
  EXPECT_FALSE(has(sync_run, "behind the next steps")) << sync_run.out;
  for (int step : {2, 4, 6}) {
    const std::string name = fmt::format("step_{:08}", step);
    const std::map<std::string, std::string> af = files_of(a / "ck" / name),
                                             sf = files_of(s / "ck" / name);
    EXPECT_EQ(af.size(), 3u) << name << ": a manifest and 2 shard files";
    EXPECT_TRUE(af == sf) << name << ": the async and the synchronous checkpoints differ";
  }
  EXPECT_EQ(file_bytes(a / "final.safetensors"), file_bytes(s / "final.safetensors"));

  const std::vector<nlohmann::json> am = read_metrics(a / "m.jsonl"),
                                    sm = read_metrics(s / "m.jsonl");
  ASSERT_EQ(am.size(), 6u);
  ASSERT_EQ(sm.size(), 6u);
  for (size_t i = 0; i < am.size(); ++i) {
    const bool checkpoint_step = (i + 1) % 2 == 0;
    EXPECT_EQ(am[i].contains("checkpoint_stall_s"), checkpoint_step) << am[i];
    EXPECT_EQ(sm[i].contains("checkpoint_stall_s"), checkpoint_step) << sm[i];
    if (checkpoint_step) {
      EXPECT_GE(am[i].at("checkpoint_stall_s").get<double>(), 0.0) << am[i];
    }
    EXPECT_EQ(am[i].at("loss"), sm[i].at("loss")) << "step " << i + 1;
  }

  // Resumed from the async checkpoint of step 2: steps 3-6 and the final
  // weights are the uninterrupted run's, bit for bit.
  const CmdResult resumed = train(
      async_bin, "--resume ck/step_00000002 --metrics resumed.jsonl --save resumed.safetensors");
  EXPECT_TRUE(has(resumed, "weights: resumed from ck/step_00000002 (step 2")) << resumed.out;
  const std::vector<nlohmann::json> rm = read_metrics(a / "resumed.jsonl");
  ASSERT_EQ(rm.size(), 4u);
  for (size_t i = 0; i < rm.size(); ++i)
    for (const char* key : {"step", "loss", "grad_norm", "lr"})
      EXPECT_EQ(rm[i].at(key), am[i + 2].at(key)) << key << " of step " << i + 3;
  const std::string straight = file_bytes(a / "final.safetensors");
  EXPECT_FALSE(straight.empty());
  EXPECT_TRUE(file_bytes(a / "resumed.safetensors") == straight) << "the final weights differ";
}

// A checkpoint written behind the steps holds its own step's state, not the
// later steps': with every shard file's open slowed by a second (an
// LD_PRELOAD shim), steps 3 and 4 run while step 2's checkpoint is written,
// and steps 5 and 6 while step 4's is; their files are still byte for byte
// those --checkpoint-sync writes.
TEST(AsyncCheckpoint, ACheckpointWrittenBehindTheStepsHoldsItsOwnStep) {
  const E2eConfig c = checkpointed(6);
  const fs::path async_bin = own_binary(c, "slow"), sync_bin = own_binary(c, "slow_sync");
  const fs::path a = async_bin.parent_path(), s = sync_bin.parent_path();
  const fs::path lib = failing_io_library(a);
  allow_mpi_as_root();
  const CmdResult slow = run_command(fmt::format(
      "cd {} && FSDPGEN_TEST_SLOW_OPEN=.partial/shard_ LD_PRELOAD={} timeout 300 {} --metrics "
      "m.jsonl",
      a.string(), lib.string(), launch(2, async_bin)));
  ASSERT_EQ(slow.status, 0) << slow.out;
  train(sync_bin, "--metrics m.jsonl --checkpoint-sync");
  for (int step : {2, 4}) {
    // Written in a second or more, while the next steps ran: each took far less.
    const std::regex line(fmt::format(
        R"(checkpoint: step {} written to ck/step_{:08} \([0-9.]+ MiB in ([0-9.]+) s behind the )"
        R"(next steps)",
        step, step));
    std::smatch m;
    ASSERT_TRUE(std::regex_search(slow.out, m, line)) << slow.out;
    EXPECT_GE(std::stod(m[1]), 1.0) << slow.out;
  }
  ASSERT_EQ(read_metrics(a / "m.jsonl").size(), 6u);
  for (int step : {2, 4, 6}) {
    const std::string name = fmt::format("step_{:08}", step);
    const std::map<std::string, std::string> af = files_of(a / "ck" / name),
                                             sf = files_of(s / "ck" / name);
    EXPECT_EQ(af.size(), 3u) << name;
    EXPECT_TRUE(af == sf) << name
                          << ": the checkpoint written behind the steps differs from the "
                             "synchronous one";
  }
}

// Rank 1 stalls in step 5, while the checkpoint of step 4 is still pending
// (staged and written behind step 5, completed only at the next checkpoint):
// the watchdog ends every rank with code 3, step 2's checkpoint is complete,
// step 4's is left .partial, and --resume continues from step 2 as if the run
// had never stopped.
TEST(AsyncCheckpoint, ARunThatDiesWithACheckpointPendingKeepsTheCompletedOnes) {
  const E2eConfig c = checkpointed(8);
  const fs::path bin = own_binary(c, "dies");
  const fs::path dir = bin.parent_path();
  fs::create_directories(dir / "watch");
  const CmdResult died =
      run_binary(2, bin,
                 fmt::format("--metrics died.jsonl --stall-timeout 2 --inject-stall 1:4:100 "
                             "--watch-dir {}",
                             (dir / "watch").string()));
  EXPECT_EQ(died.status, kStalledExitCode) << died.out;
  EXPECT_TRUE(has(died, "checkpoint: step 2 written to ck/step_00000002 (")) << died.out;
  EXPECT_FALSE(has(died, "checkpoint: step 4 written")) << died.out;
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000002" / "manifest.json"));
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000004.partial")) << "the pending checkpoint";
  EXPECT_FALSE(fs::exists(dir / "ck" / "step_00000004.partial" / "manifest.json"));
  EXPECT_FALSE(fs::exists(dir / "ck" / "step_00000004"));

  const CmdResult straight = train(bin, "--checkpoint-every 0 --metrics straight.jsonl");
  const CmdResult resumed = train(bin, "--resume --metrics resumed.jsonl");
  EXPECT_TRUE(has(resumed, "weights: resumed from ck/step_00000002 (step 2")) << resumed.out;
  const std::vector<double> a = read_losses(dir / "straight.jsonl"),
                            b = read_losses(dir / "resumed.jsonl");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 6u) << resumed.out;
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_EQ(b[i], a[i + 2]) << "step " << i + 3;
  // The resumed run's first completed save removed the stale partial one.
  EXPECT_FALSE(fs::exists(dir / "ck" / "step_00000004.partial"));
  EXPECT_TRUE(fs::exists(dir / "ck" / "step_00000008" / "manifest.json"));
}

// SIGUSR1 after a few steps: the run completes the pending checkpoint, writes
// the stop's own and exits 0; no .partial is left.
TEST(AsyncCheckpoint, AStopSignalCompletesThePendingCheckpoint) {
  allow_mpi_as_root();
  const E2eConfig c = checkpointed(1000000);
  const fs::path bin = own_binary(c, "stop");
  const fs::path dir = bin.parent_path();
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string line = fmt::format("cd {} && exec {} --metrics m.jsonl > run.out 2>&1",
                                         dir.string(), launch(2, bin));
    execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (complete_lines(dir / "m.jsonl") < 5 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  kill(pid, SIGUSR1);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "the run did not stop";
    }
    std::this_thread::sleep_for(50ms);
  }
  const std::string out = file_bytes(dir / "run.out");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const int64_t n = static_cast<int64_t>(read_metrics(dir / "m.jsonl").size());
  ASSERT_GE(n, 5) << out;
  EXPECT_NE(out.find(fmt::format("stopped after step {} of 1000000", n)), std::string::npos) << out;
  for (int64_t step = 2; step <= n; step += 2)
    EXPECT_TRUE(fs::exists(dir / "ck" / fmt::format("step_{:08}", step) / "manifest.json"))
        << "step " << step << "\n"
        << out;
  EXPECT_TRUE(fs::exists(dir / "ck" / fmt::format("step_{:08}", n) / "manifest.json")) << out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "ck"))
    EXPECT_EQ(e.path().extension(), "") << e.path() << " is left over";
}

}  // namespace
}  // namespace fsdpgen::test
