// StallTest (cuda): --inject-stall on a GPU stalls the rank's GPU itself (a
// spin kernel before its first compute op of the step), as a hung kernel or
// a collective a peer never joins would. The streams' marks (stream memory
// operations into mapped host memory, runtime/cuda/executor.h) let the
// watchdog name that op rather than "the host waits for the GPU": the report
// names the rank, op and step within seconds and every rank exits with the
// stalled exit code (3), as on the CPU (tests/e2e/StallTest.cpp). Worlds 1
// (the step captured in a CUDA graph before the stalled one, issued eagerly)
// and 2 (ranks sharing the GPU through the comm layer's MPI test mode, whose
// host-synchronous collectives are marked on the host). Needs a GPU (skips,
// saying why, without one).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "tests/cuda/Device.h"
#include "tests/e2e/E2e.h"
#include "tests/e2e/Stall.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// What a GPU without stream memory operations prints (executor.cpp): then the
// watchdog cannot see the op, and these tests would fail for that reason.
constexpr const char* kNoMarksNote = "cannot mark the ops they run";

// The test's own copy (own_copy) of the world's binary, built under the
// build directory's lock: the tests of one world share it.
fs::path cuda_stall_binary(int world, const std::string& name) {
  E2eConfig c;
  c.world = world;
  const fs::path dir = e2e_dir(fmt::format("cuda_stall_w{}", world));
  return with_dir_lock(dir, [&] { return own_copy(build_binary(dir, c.spec(), "cuda"), name); });
}

std::string comm_flag(int world) {
  return world > 1 ? " --comm mpi-test" : "";
}

class CudaStall : public NeedsCudaDevice<::testing::TestWithParam<int>> {};

// Rank 0's GPU spins 60 s in its first compute op of step 3: with a 3 s
// timeout the report names that op (from the GPU's mark) and step within
// seconds, and every rank exits by itself with code 3.
TEST_P(CudaStall, TheGpuOpIsReportedAndEveryRankExits) {
  const int world = GetParam();
  const fs::path bin = cuda_stall_binary(world, fmt::format("cuda_stall_injected_w{}", world));
  const auto [op, label] = first_compute_op(bin);
  ASSERT_GE(op, 0);
  const fs::path watch = watch_root(bin);
  const auto t0 = clock_type::now();
  CmdResult r = run_binary(world, bin,
                           fmt::format("--steps 6 --stall-timeout 3 --inject-stall 0:2:60 "
                                       "--watch-dir {}{}",
                                       watch.string(), comm_flag(world)));
  const double seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("%s(%.1f s)\n", r.out.c_str(), seconds);
  EXPECT_EQ(r.out.find(kNoMarksNote), std::string::npos) << r.out;
  EXPECT_EQ(r.status, kStalledExitCode) << r.out;
  EXPECT_LT(seconds, 40) << "the job ends within the timeout and a few seconds (and its start on "
                            "the GPU), not after the 60 s spin";
  EXPECT_EQ(count(r.out, "stall at "), 1) << "one report:\n" << r.out;
  EXPECT_NE(r.out.find(fmt::format("stall at step 3: rank 0 has been in op {} ({}: forward, "
                                   "compute stream) for ",
                                   op, label)),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(world > 1 ? "for rank 0 (stall timeout 3 s)\n" : " (stall timeout 3 s)\n"),
            std::string::npos)
      << r.out;
  // Every other rank sees the report claimed and stops by itself.
  EXPECT_EQ(count(r.out, "stopping: rank "), world - 1) << r.out;
  EXPECT_TRUE(holds_nothing(watch)) << watch << ": the reporter removes the watch directory";
}

// A GPU pause shorter than the timeout is no stall (at world 1 in the step
// that would have been captured: the graph is captured a step later), and
// steps with marks, replayed from the graph, raise no false alarm: the run
// completes, allocates nothing in its steps and removes its watch directory.
TEST_P(CudaStall, AShortPauseIsNotReported) {
  const int world = GetParam();
  const fs::path bin = cuda_stall_binary(world, fmt::format("cuda_stall_short_w{}", world));
  const fs::path watch = watch_root(bin);
  CmdResult r = run_binary(world, bin,
                           fmt::format("--steps 40 --stall-timeout 2 --inject-stall 0:1:1 "
                                       "--watch-dir {}{}",
                                       watch.string(), comm_flag(world)));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("stall"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(kNoMarksNote), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << "no allocation in steps:\n"
                                                             << r.out;
  EXPECT_TRUE(holds_nothing(watch)) << watch << ": rank 0 removes the watch directory at the end";
}

INSTANTIATE_TEST_SUITE_P(Worlds, CudaStall, ::testing::Values(1, 2));

}  // namespace
}  // namespace fsdpgen::test
