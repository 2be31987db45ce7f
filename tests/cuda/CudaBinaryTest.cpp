// CudaBinaryTest: what else a generated CUDA binary does on a GPU (each test
// skips, saying why, without one), against its eager steps, the planner and
// the CPU binary: graph replays, measured traces, fp16 overflow skips,
// weights and checkpoints that move between CPU and GPU, validation losses,
// and device memory as planned.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/cuda/CudaE2e.h"

namespace fsdpgen::test {
namespace {

class CudaBinary : public CudaTraining {};

// The graph replays what eager issue does: equal losses, step for step.
TEST_F(CudaBinary, GraphAndEagerStepsAgree) {
  E2eConfig c;
  c.world = 1;
  c.steps = 5;
  std::vector<double> graph = cuda_losses("graph", c);
  std::vector<double> eager = cuda_losses("eager", c, "--no-graph");
  ASSERT_EQ(graph.size(), 5u);
  ASSERT_EQ(eager.size(), 5u);
  for (size_t i = 0; i < graph.size(); ++i)
    EXPECT_NEAR(graph[i], eager[i], 1e-6) << "step " << i + 1;
}

// --trace at world 2 (MPI test mode): the measured CUDA timeline has every
// op of every rank, named as the planner's trace names them; `line` is in
// the binary's output.
void expect_cuda_trace(const std::string& name, const E2eConfig& c, const std::string& line) {
  std::filesystem::path bin = build_cuda(name, c.spec());
  CmdResult r = run_binary(2, bin, "--comm mpi-test --trace trace.json --trace-step 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("trace: step 2 of 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  expect_trace_like_predicted(bin.parent_path(), "h100-sxm", 2);
}

TEST_F(CudaBinary, TraceHasEveryOp) {
  E2eConfig c;
  c.world = 2;
  expect_cuda_trace("trace", c, "MPI test mode");
}

// Offload: host ops are in the measured trace too (timed on the host clock
// from the step's start).
TEST_F(CudaBinary, OffloadTraceHasEveryOp) {
  E2eConfig c;
  c.world = 2;
  c.offload = "cpu";
  expect_cuda_trace("trace_offload", c, "optimizer on the host");
}

// fp16: a step whose gradients overflow (--inject-overflow) is skipped, in
// a captured graph too (the loss scale is read from device memory): the
// weights after it are those before it, the loss scale halves, and the
// losses go on falling.
TEST_F(CudaBinary, Fp16OverflowIsSkippedAndTheScaleBacksOff) {
  E2eConfig c;
  c.world = 1;
  c.steps = 6;
  c.param = c.reduce_dtype = "fp16";
  expect_overflow_skipped_and_recovered(build_cuda("fp16_overflow", c.spec()), 1, 6, 3);
}

// Weights written by the CUDA binary load into the CPU binary (and the
// other way round) and give the same loss.
TEST_F(CudaBinary, WeightsMoveBetweenCpuAndGpu) {
  E2eConfig c;
  c.world = 1;
  c.steps = 2;
  std::filesystem::path gpu = build_cuda("weights_gpu", c.spec());
  CmdResult saved = run_binary(1, gpu, "--save w.safetensors");
  ASSERT_EQ(saved.status, 0) << saved.out;
  std::filesystem::path cpu = build_binary(e2e_dir("weights_cpu"), c.spec());
  const std::string w = (gpu.parent_path() / "w.safetensors").string();
  CmdResult a = run_binary(1, cpu, "--steps 1 --metrics m.jsonl --init-from " + w);
  CmdResult b = run_binary(1, gpu, "--steps 1 --metrics m.jsonl --init-from " + w);
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  std::vector<double> la = read_losses(cpu.parent_path() / "m.jsonl");
  std::vector<double> lb = read_losses(gpu.parent_path() / "m.jsonl");
  ASSERT_EQ(la.size(), 1u);
  ASSERT_EQ(lb.size(), 1u);
  EXPECT_NEAR(la[0], lb[0], 1e-4);
}

// Validation on a GPU (its pass issued eagerly between graph replays): the
// validation losses after steps 2 and 4 of fp32 and bf16 runs (with offload,
// 2 micro-batches and 2 ranks on one GPU through --comm mpi-test) equal the
// CPU binary's within the training tolerance.
TEST_F(CudaBinary, ValidationLossesEqualTheCpuBinarys) {
  for (const char* param : {"fp32", "bf16"}) {
    E2eConfig c;
    c.world = 1;
    c.param = param;
    c.micro_batches = 2;
    c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 2\n  val_sequences = 7\n";
    for (const char* offload : {"none", "cpu"}) {
      c.offload = offload;
      const std::filesystem::path gpu = build_cuda("val_gpu_" + c.name(), c.spec());
      const std::filesystem::path cpu = build_binary(e2e_dir("val_cpu_" + c.name()), c.spec());
      ASSERT_EQ(run_binary(1, gpu, "--metrics m.jsonl").status, 0) << c.name();
      ASSERT_EQ(run_binary(1, cpu, "--metrics m.jsonl").status, 0) << c.name();
      auto val_losses = [](const std::filesystem::path& m) {
        std::vector<double> v;
        for (const nlohmann::json& line : read_metrics(m))
          if (line.contains("val_loss")) v.push_back(line["val_loss"].get<double>());
        return v;
      };
      const std::vector<double> a = val_losses(cpu.parent_path() / "m.jsonl");
      const std::vector<double> b = val_losses(gpu.parent_path() / "m.jsonl");
      ASSERT_EQ(a.size(), 2u) << c.name();
      ASSERT_EQ(b.size(), 2u) << c.name();
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(b[i], a[i], loss_tolerance(c)) << c.name() << " validation " << i;
      std::printf("[ measured ] %s: validation cuda %.6f %.6f, cpu %.6f %.6f\n", c.name().c_str(),
                  b[0], b[1], a[0], a[1]);
    }
  }
  E2eConfig two;  // two ranks on one GPU
  two.train_extra = "  val = synthetic(seed = 7)\n  val_every = 2\n  val_sequences = 7\n";
  const std::filesystem::path gpu = build_cuda("val_gpu_two_ranks", two.spec());
  const std::filesystem::path cpu = build_binary(e2e_dir("val_cpu_two_ranks"), two.spec());
  CmdResult g = run_binary(2, gpu, "--comm mpi-test --metrics m.jsonl");
  ASSERT_EQ(g.status, 0) << g.out;
  ASSERT_EQ(run_binary(2, cpu, "--metrics m.jsonl").status, 0);
  const std::vector<nlohmann::json> a = read_metrics(cpu.parent_path() / "m.jsonl");
  const std::vector<nlohmann::json> b = read_metrics(gpu.parent_path() / "m.jsonl");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_TRUE(b.back().contains("val_loss")) << b.back();
  EXPECT_NEAR(b.back()["val_loss"].get<double>(), a.back()["val_loss"].get<double>(),
              loss_tolerance(two));
}

// Checkpoints on a GPU: a run resumed from step 2 continues bit for bit
// (the resumed run issues its first step eagerly and captures the next, as
// the straight run did from step 0: kernels are deterministic and cuBLASLt
// picks the same algorithms for the same shapes); with offload the shards come
// from pinned host memory. The GPU's checkpoint resumes on the CPU binary
// within the CUDA-vs-CPU tolerance.
void expect_cuda_resume(const std::string& name, const E2eConfig& c) {
  const std::filesystem::path bin = build_cuda(name, c.spec());
  const std::filesystem::path dir = bin.parent_path();
  std::filesystem::remove_all(dir / "ckpt");
  CmdResult straight = run_binary(
      c.world, bin, "--checkpoint-every 2 --metrics straight.jsonl --save a.safetensors");
  ASSERT_EQ(straight.status, 0) << straight.out;
  CmdResult resumed =
      run_binary(c.world, bin,
                 "--resume ckpt/step_00000002 --checkpoint-every 0 --metrics resumed.jsonl --save "
                 "b.safetensors");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  const std::vector<double> a = read_losses(dir / "straight.jsonl");
  const std::vector<double> b = read_losses(dir / "resumed.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(b.size(), static_cast<size_t>(c.steps - 2));
  for (size_t i = 0; i < b.size(); ++i)
    EXPECT_EQ(b[i], a[i + 2]) << "step " << i + 3;
  EXPECT_EQ(safetensors_tensor_bytes(dir / "a.safetensors"),
            safetensors_tensor_bytes(dir / "b.safetensors"));

  const std::filesystem::path cpu = build_binary(e2e_dir(name + "_cpu"), c.spec());
  CmdResult on_cpu = run_binary(c.world, cpu,
                                fmt::format("--resume {} --checkpoint-every 0 --metrics m.jsonl",
                                            (dir / "ckpt/step_00000002").string()));
  ASSERT_EQ(on_cpu.status, 0) << on_cpu.out;
  const std::vector<double> l = read_losses(cpu.parent_path() / "m.jsonl");
  ASSERT_EQ(l.size(), b.size());
  for (size_t i = 0; i < l.size(); ++i)
    EXPECT_NEAR(l[i], a[i + 2], loss_tolerance(c)) << "step " << i + 3;
}

TEST_F(CudaBinary, ResumesFromACheckpointBitExactly) {
  E2eConfig c;
  c.world = 1;
  c.steps = 4;
  c.param = "bf16";
  expect_cuda_resume("resume", c);
}

TEST_F(CudaBinary, ResumesAnOffloadedRunBitExactly) {
  E2eConfig c;
  c.world = 1;
  c.steps = 4;
  c.offload = "cpu";
  expect_cuda_resume("resume_offload", c);
}

// Device memory as the driver counts it (cudaMemGetInfo: the whole GPU, so
// no other process may use it meanwhile: ctest runs this test alone, see
// tests/CMakeLists.txt): the arena takes what `fsdpgen plan` says, rounded up
// to the driver's 2 MiB pages; the steps after the warm-up (GEMM algorithm
// choice, then graph capture) add nothing on the GPU; with offload, pinning
// the host arena grows the process by its planned pages (and the driver's
// records of them) and they stay resident; and
// fsdpgen's code allocates nothing inside a step.
TEST_F(CudaBinary, DeviceMemoryIsThePlannedArenaAndStepsAddNothing) {
  constexpr int64_t kGuardBytes = 4096, kDriverPageBytes = 2 << 20;
  // The host's resident-set counters lag by up to 64 pages per CPU.
  constexpr int64_t kHostLagBytes = 8 << 20;
  constexpr int64_t kPinRecordBytes = 4 << 20;
  for (const std::string offload : {"none", "cpu"}) {
    SCOPED_TRACE("offload = " + offload);
    E2eConfig c;
    c.world = 1;
    c.steps = 6;
    c.offload = offload;
    const std::filesystem::path bin = build_cuda("memory_" + offload, c.spec());
    const planned_arena_bytes planned = planned_arenas(bin.parent_path(), "h100-sxm");
    CmdResult r = run_binary(1, bin, "--metrics m.jsonl");
    ASSERT_EQ(r.status, 0) << r.out;
    std::printf("%s", r.out.c_str());
    EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << r.out;
    const std::vector<nlohmann::json> m = read_metrics(bin.parent_path() / "m.jsonl");
    ASSERT_EQ(m.size(), 6u);
    const size_t warmup = offload == "none" ? 2 : 1;  // no graph with offload
    for (size_t s = 0; s < m.size(); ++s) {
      const int64_t arena = m[s].at("device_arena_bytes").get<int64_t>();
      EXPECT_GE(arena, planned.device + kGuardBytes) << "step " << s + 1;
      EXPECT_LT(arena, planned.device + kGuardBytes + kDriverPageBytes) << "step " << s + 1;
      EXPECT_EQ(m[s].at("arena_resident_bytes").get<int64_t>(), arena_in_pages(planned.host))
          << "step " << s + 1;
      // Pinning also grows the process by the driver's own records of the
      // pinned range: 1,540,096 bytes for this 0.7 MB arena on an H100
      // (driver 580, 2026-11-26).
      const int64_t growth = m[s].at("arena_growth_bytes").get<int64_t>();
      EXPECT_GE(growth, arena_in_pages(planned.host))
          << "step " << s + 1 << ": what pinning the host arena added to the process";
      EXPECT_LE(growth, arena_in_pages(planned.host) + kPinRecordBytes)
          << "step " << s + 1 << ": what pinning the host arena added to the process";
      if (s < warmup) continue;
      EXPECT_EQ(m[s].at("device_used_bytes").get<int64_t>(),
                m[warmup - 1].at("device_used_bytes").get<int64_t>())
          << "step " << s + 1 << " changed the GPU's memory in use";
      EXPECT_LE(m[s].at("host_resident_bytes").get<int64_t>() -
                    m[warmup - 1].at("host_resident_bytes").get<int64_t>(),
                kHostLagBytes)
          << "step " << s + 1;
    }
  }
}

}  // namespace
}  // namespace fsdpgen::test
