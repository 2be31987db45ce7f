// CommTest (cuda): runs cuda_comm_check (tests/cuda/CommCheck.cpp), which
// checks the CUDA collectives of runtime/cuda/comm.h exactly against the CPU
// ones, on two ranks sharing the GPUs (the MPI test mode, and NCCL where each
// rank has a GPU) and on one rank alone (both modes), and that it ran every
// check expected for the world size. Skips, with the program's reason, where
// no CUDA device is present (exit status 77).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <string>

#include "tests/common/Command.h"

namespace {

using fsdpgen::test::CmdResult;
using fsdpgen::test::run_command;

constexpr int kSkipped = 77;
constexpr int kTimedOut = 124;  // timeout(1)

// cuda_comm_check under the given launcher prefix ("" alone, or mpirun ...).
CmdResult run_check(const std::string& launcher) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  return run_command("timeout 300 " + launcher + CUDA_COMM_CHECK_BIN);
}

// The "no CUDA device: ..." line of a skipped run.
std::string skip_reason(const std::string& out) {
  const size_t at = out.find("no CUDA device:");
  if (at == std::string::npos) return out;
  return out.substr(at, out.find('\n', at) - at);
}

// The checks cuda_comm_check runs on `world` ranks of one machine. For each
// shard-group size dividing the world, in each mode: 8 collectives
// (all_gather, reduce_scatter, all_reduce, all_reduce in place; fp32 and
// bf16) on 3 groups (shard, replica, world) at 2 sizes, and one concurrent
// check; then the test mode's 2 refusals (staging, graph capture) or NCCL's
// graph replay. NCCL runs where every rank has a GPU; otherwise one check
// that NCCL mode is refused.
int expected_checks(int world) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const bool nccl = devices >= world;
  const int common = 8 * 3 * 2 + 1, mpi_test = common + 2, with_nccl = common + 1;
  int checks = nccl ? 0 : 1;
  for (int s = 1; s <= world; ++s)
    if (world % s == 0) checks += mpi_test + (nccl ? with_nccl : 0);
  return checks;
}

// Every expected check ran (one "ok" line each, and the count) and none failed.
void expect_passed(const CmdResult& r, int world) {
  EXPECT_NE(r.status, kTimedOut) << "timed out: the ranks hung\n" << r.out;
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  const int want = expected_checks(world);
  EXPECT_NE(r.out.find(std::to_string(want) + " check(s) run, 0 failed"), std::string::npos)
      << "expected " << want << " checks\n"
      << r.out;
  const std::regex ok_line("(^|\n)ok   ");
  const auto ok_lines = std::distance(std::sregex_iterator(r.out.begin(), r.out.end(), ok_line),
                                      std::sregex_iterator());
  EXPECT_EQ(ok_lines, want) << r.out;
}

TEST(CudaComm, TwoRanksMatchTheCpuCollectives) {
  const CmdResult r = run_check("mpirun -n 2 --oversubscribe --bind-to none ");
  if (r.status == kSkipped) GTEST_SKIP() << skip_reason(r.out);
  expect_passed(r, 2);
}

TEST(CudaComm, OneRankMatchesTheCpuCollectivesInBothModes) {
  const CmdResult r = run_check("");
  if (r.status == kSkipped) GTEST_SKIP() << skip_reason(r.out);
  expect_passed(r, 1);
  EXPECT_NE(r.out.find("ok   nccl S=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   mpi_test S=1"), std::string::npos) << r.out;
}

}  // namespace
