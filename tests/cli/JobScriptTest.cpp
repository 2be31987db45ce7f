// The Slurm batch script of `fsdpgen SPEC -o train --sbatch job.sh`
// (codegen/emit/JobScript.h): what it asks Slurm for, for the CPU and CUDA
// targets; paths bash must quote; and, with stand-ins for srun and scontrol
// (no Slurm needed), what it does on a time-limit signal (passes it on and
// requeues), on SIGTERM (waits, no requeue) and when the run ends or fails.
// tests/slurm/multihost.sh's `sbatch` case runs it under a real Slurm.
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/emit/JobScript.h"
#include "tests/cli/CliHelpers.h"

namespace {

namespace fs = std::filesystem;
using fsdpgen::job_script;
using fsdpgen::JobScriptInput;
using fsdpgen::test::CmdResult;
using fsdpgen::test::file_bytes;
using fsdpgen::test::fresh_dir;
using fsdpgen::test::has;
using fsdpgen::test::run;
using fsdpgen::test::run_command;

JobScriptInput input(const std::string& dir) {
  JobScriptInput in;
  in.command = "fsdpgen s.fsdp -o train --sbatch job.sh";
  in.revision = "test";
  in.name = "hosts";
  in.binary = dir + "/train";
  in.workdir = dir;
  in.world = 16;
  in.ranks_per_node = 8;
  in.sharding = "hybrid_shard";
  in.checkpoint_dir = "ckpt";
  return in;
}

// Runs `lines` with bash (run_command's shell is sh), from a file in `dir`.
CmdResult run_bash(const std::string& dir, const std::string& lines) {
  std::ofstream(dir + "/drive.sh") << lines << "\n";
  return run_command("bash " + dir + "/drive.sh");
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(JobScript, AsksForThePlansNodesAndRanks) {
  JobScriptInput in = input("/work/run");
  const std::string cpu = job_script(in);
  for (const char* line :
       {"#!/bin/bash", "#SBATCH --job-name=hosts", "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=8", "#SBATCH --exclusive", "#SBATCH --signal=B:USR1@120",
        "#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --output=%x-%j.log",
        "#SBATCH --chdir=/work/run", "cd /work/run || exit 1",
        "srun --mpi=pmix --distribution=block --cpus-per-task=\"$cpus\" --kill-on-bad-exit=1 \\",
        "cpus=$((${SLURM_CPUS_ON_NODE:-8} / 8))"})
    EXPECT_TRUE(has_line(cpu, line)) << line << "\n" << cpu;
  EXPECT_TRUE(has(CmdResult{0, cpu}, "world 16 = 2 nodes x 8 ranks")) << cpu;
  EXPECT_EQ(cpu.find("--gpus-per-node"), std::string::npos) << cpu;
  in.cuda = true;
  in.gpu = "h100-sxm";
  const std::string cuda = job_script(in);
  EXPECT_TRUE(has_line(cuda, "#SBATCH --gpus-per-node=8")) << cuda;
  EXPECT_TRUE(has(CmdResult{0, cuda}, "for CUDA (h100-sxm)")) << cuda;
  // Every #SBATCH line comes before the first command: sbatch stops reading them there.
  for (const std::string& text : {cpu, cuda}) {
    const size_t first_command = text.find("\nset -u\n");
    ASSERT_NE(first_command, std::string::npos);
    EXPECT_EQ(text.find("#SBATCH", first_command), std::string::npos) << text;
  }
}

// A working directory with a space and a quote: bash reads the script, and
// its cd reaches that directory; no #SBATCH --chdir (sbatch's lines are not
// bash), so the log goes where sbatch runs.
TEST(JobScript, QuotesPathsBashMustQuote) {
  const std::string base = fresh_dir("job-script-quotes");
  const std::string dir = base + "/it's a dir";
  fs::create_directories(dir);
  const std::string script = job_script(input(dir));
  std::ofstream(dir + "/job.sh") << script;
  EXPECT_EQ(script.find("#SBATCH --chdir"), std::string::npos) << script;
  CmdResult syntax = run_bash(base, "bash -n \"" + dir + "/job.sh\" && echo ok");
  EXPECT_EQ(syntax.out, "ok\n") << syntax.out << script;
  // The cd line alone, run: it lands in the directory.
  const size_t cd = script.find("\ncd ");
  ASSERT_NE(cd, std::string::npos);
  const std::string line = script.substr(cd + 1, script.find('\n', cd + 1) - cd - 1);
  CmdResult where = run_bash(base, line + " && pwd");
  EXPECT_EQ(where.status, 0) << line << "\n" << where.out;
  EXPECT_EQ(where.out, dir + "\n") << line;
}

// The CLI: the binary and the script beside it, executable, said once; a
// script that cannot be written is refused before the build, leaving no binary.
TEST(JobScript, BuildWritesItBesideTheBinary) {
  const std::string dir = fresh_dir("job-script-build");
  // fsdpgen hosts.fsdp -o BINARY --sbatch SCRIPT, run in dir.
  auto build = [&](const std::string& binary, const std::string& script) {
    return run_command(
        fmt::format("cd {} && {} {}/tests/slurm/hosts.fsdp --target cpu -o {} --sbatch {}", dir,
                    FSDPGEN_BIN, FSDPGEN_SOURCE_DIR, binary, script));
  };
  CmdResult b = build("train", "job.sh");
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_TRUE(has(b,
                  "fsdpgen: wrote job.sh, a Slurm batch script for 2 nodes x 2 ranks: sbatch "
                  "job.sh\n"))
      << b.out;
  const std::string script = file_bytes(dir + "/job.sh");
  // Its header names the command as typed (the shorthand, not `build`).
  EXPECT_TRUE(has_line(script, fmt::format("#   fsdpgen {}/tests/slurm/hosts.fsdp --target cpu -o "
                                           "train --sbatch job.sh",
                                           FSDPGEN_SOURCE_DIR)))
      << script;
  EXPECT_TRUE(has_line(script, "#SBATCH --nodes=2")) << script;
  EXPECT_TRUE(has_line(script, "#SBATCH --chdir=" + dir)) << script;
  EXPECT_TRUE(has_line(script, fmt::format("    {}/train --resume-if-exists "
                                           "${{watch[@]+\"${{watch[@]}}\"}} \"$@\" &",
                                           dir)))
      << script;
  EXPECT_NE(fs::status(dir + "/job.sh").permissions() & fs::perms::owner_exec, fs::perms::none);

  CmdResult bad = build("train2", "missing/job.sh");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_TRUE(has(bad,
                  "fsdpgen: error: cannot write the job script 'missing/job.sh': 'missing' "
                  "does not exist"))
      << bad.out;
  EXPECT_FALSE(fs::exists(dir + "/train2"));
}

// The script run by bash with stand-ins for srun (records its arguments,
// runs until a signal, or exits with FAKE_SRUN_EXIT) and scontrol (records
// its arguments). `signal` is sent to the script once srun runs ("" none).
struct FakeJob {
  std::string calls;  // what srun and scontrol were asked
  std::string out;    // the script's output
  int status = -1;    // the script's exit status
};

FakeJob run_fake_job(const std::string& name, const std::string& signal,
                     const std::string& srun_exit = "", const std::string& flags = "--steps 5") {
  const std::string dir = fresh_dir("job-script-" + name);
  fs::create_directories(dir + "/bin");
  std::ofstream(dir + "/bin/srun") << R"(#!/bin/bash
echo "srun $*" >>calls
trap 'echo "srun: SIGUSR1" >>calls; exit 0' USR1
trap 'echo "srun: SIGTERM" >>calls; exit 0' TERM
[[ -n ${FAKE_SRUN_EXIT:-} ]] && exit "$FAKE_SRUN_EXIT"
echo $$ >srun.started
for ((i = 0; i < 600; i++)); do sleep 0.05; done
echo "srun: no signal came" >>calls
exit 9
)";
  std::ofstream(dir + "/bin/scontrol") << "#!/bin/bash\necho \"scontrol $*\" >>calls\n";
  fs::permissions(dir + "/bin/srun", fs::perms::owner_all);
  fs::permissions(dir + "/bin/scontrol", fs::perms::owner_all);
  JobScriptInput in = input(dir);
  in.world = 4;
  in.ranks_per_node = 2;
  std::ofstream(dir + "/job.sh") << job_script(in);
  const std::string env = fmt::format(
      "export PATH={}/bin:$PATH SLURM_JOB_ID=7 SLURM_CPUS_ON_NODE=8 "
      "SLURM_JOB_NODELIST='node[1-2]'{}",
      dir, srun_exit.empty() ? "" : " FAKE_SRUN_EXIT=" + srun_exit);
  // Slurm's SIGTERM reaches every process of the job; the time limit's
  // SIGUSR1 (--signal=B:) only the batch script. (The stand-in srun ends by
  // itself after 30 s.)
  const std::string send = signal.empty()
                               ? ""
                               : fmt::format(
                                     "for ((i = 0; i < 200; i++)); do [[ -s srun.started ]] && "
                                     "break; sleep 0.05; done\nkill -{} $pid{}\n",
                                     signal, signal == "TERM" ? " $(cat srun.started)" : "");
  CmdResult r = run_bash(dir, fmt::format("cd {} || exit 1\n{}\nbash job.sh {} >job.out 2>&1 &\n"
                                          "pid=$!\n{}wait $pid\necho $?",
                                          dir, env, flags, send));
  FakeJob j;
  j.status = std::stoi(r.out.empty() ? "-1" : r.out);
  j.calls = file_bytes(dir + "/calls");
  j.out = file_bytes(dir + "/job.out");
  return j;
}

TEST(JobScript, TimeLimitSignalIsPassedOnAndTheJobRequeued) {
  const FakeJob j = run_fake_job("usr1", "USR1");
  EXPECT_EQ(j.status, 0) << j.out << j.calls;
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/job-script-usr1";
  EXPECT_EQ(j.calls, fmt::format("srun --mpi=pmix --distribution=block --cpus-per-task=4 "
                                 "--kill-on-bad-exit=1 {0}/train --resume-if-exists --watch-dir "
                                 "{0} --steps 5\nsrun: SIGUSR1\nscontrol requeue 7\n",
                                 dir))
      << j.out;
  EXPECT_TRUE(has(CmdResult{0, j.out}, "fsdpgen job 7: start 1 on node[1-2], ")) << j.out;
  EXPECT_TRUE(has(CmdResult{0, j.out}, "fsdpgen job 7: stopped with a checkpoint; requeued\n"))
      << j.out;
}

// SIGTERM (a requeue or preemption by Slurm, which signals the ranks itself,
// or scancel): the script outlives it, ends with srun's status (0: the ranks
// stopped with a checkpoint, not bash's 143) and requeues nothing.
TEST(JobScript, SigtermWaitsForTheRanksAndRequeuesNothing) {
  const FakeJob j = run_fake_job("term", "TERM");
  EXPECT_EQ(j.status, 0) << j.out << j.calls;
  EXPECT_TRUE(has(CmdResult{0, j.calls}, "srun: SIGTERM\n")) << j.calls;
  EXPECT_EQ(j.calls.find("scontrol"), std::string::npos) << j.calls;
  EXPECT_TRUE(has(CmdResult{0, j.out}, "SIGTERM (a requeue, preemption or scancel)")) << j.out;
}

// A run that ends (0) or fails (3: the watchdog's stall) ends the job with
// its status, requeued by nothing.
TEST(JobScript, TheRunsStatusIsTheJobs) {
  for (const char* code : {"0", "3"}) {
    const FakeJob j = run_fake_job(std::string("exit") + code, "", code);
    EXPECT_EQ(j.status, std::stoi(code)) << j.out << j.calls;
    EXPECT_EQ(j.calls.find("scontrol"), std::string::npos) << j.calls;
  }
}

// --watch-dir among the flags is the user's: the script adds none.
TEST(JobScript, AWatchDirAmongTheFlagsIsKept) {
  const FakeJob j = run_fake_job("watch", "", "0", "--watch-dir=/shared/w --steps 5");
  EXPECT_EQ(j.status, 0) << j.out << j.calls;
  EXPECT_TRUE(
      has(CmdResult{0, j.calls}, "/train --resume-if-exists --watch-dir=/shared/w --steps 5\n"))
      << j.calls;
}

}  // namespace
