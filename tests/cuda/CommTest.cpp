// CommTest (cuda): runs cuda_comm_check (tests/cuda/CommCheck.cpp), which
// checks the CUDA collectives of runtime/cuda/comm.h exactly against the CPU
// ones, on two ranks sharing the GPUs (the MPI test mode, and NCCL where each
// rank has a GPU) and on one rank alone (both modes). Skips, with the
// program's reason, where no CUDA device is present (exit status 77).
#include <gtest/gtest.h>

#include <cstdlib>
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

void expect_passed(const CmdResult& r) {
  EXPECT_NE(r.status, kTimedOut) << "timed out: the ranks hung\n" << r.out;
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("0 check(s) failed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
}

TEST(CudaComm, TwoRanksMatchTheCpuCollectives) {
  const CmdResult r = run_check("mpirun -n 2 --oversubscribe --bind-to none ");
  if (r.status == kSkipped) GTEST_SKIP() << skip_reason(r.out);
  expect_passed(r);
}

TEST(CudaComm, OneRankMatchesTheCpuCollectivesInBothModes) {
  const CmdResult r = run_check("");
  if (r.status == kSkipped) GTEST_SKIP() << skip_reason(r.out);
  expect_passed(r);
  EXPECT_NE(r.out.find("ok   nccl S=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok   mpi_test S=1"), std::string::npos) << r.out;
}

}  // namespace
