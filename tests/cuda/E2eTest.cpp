// E2eTest (cuda): generated CUDA binaries. Building needs no GPU, so the
// build tests run everywhere nvcc is (CI included): `--target cuda`
// compiles and links (with offload too), the binary prints the planned
// schedule, and without a GPU it stops with an error naming the CUDA problem
// (never a crash or a hang). Training needs a GPU (each such test skips,
// saying why, without one): every strategy at world 1 and, with the comm
// layer's MPI test mode (ranks sharing one GPU), at worlds 2 and 4, and
// offload (the optimizer on the host) at worlds 1, 2 and 4, gives per-step
// losses equal to the CPU binary's for the same spec, data and initial
// weights.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cuda/Device.h"
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

// Builds the spec for CUDA in work/NAME; returns the binary.
std::filesystem::path build_cuda(const std::string& name, const std::string& spec) {
  std::filesystem::path dir = e2e_dir(name);
  return build_binary(dir, spec, "cuda");
}

TEST(CudaBuild, Gpt2_124mBuildsAndPrintsItsSchedule) {
  std::filesystem::path dir = e2e_dir("build_gpt2_124m");
  CmdResult b = run_command(fmt::format("cd {} && {} specs/gpt2-124m.fsdp --target cuda -o {}",
                                        FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, (dir / "train").string()));
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(b.out.find("for CUDA (h100-sxm)"), std::string::npos) << b.out;
  CmdResult printed = run_command((dir / "train").string() + " --print-schedule");
  ASSERT_EQ(printed.status, 0) << printed.out;
  CmdResult planned = run_command(fmt::format(
      "cd {} && {} schedule specs/gpt2-124m.fsdp --gpu h100-sxm", FSDPGEN_SOURCE_DIR, FSDPGEN_BIN));
  ASSERT_EQ(planned.status, 0) << planned.out;
  EXPECT_EQ(printed.out, planned.out);
}

// offload = cpu: the binary builds and carries the planned schedule, whose
// norm, optimizer and host-memory all-reduces it runs on the host.
// llama builds for the GPU wherever nvcc is (fp32 and bf16, untied).
TEST(CudaBuild, LlamaBuildsAndPrintsItsSchedule) {
  for (const char* param : {"fp32", "bf16"}) {
    E2eConfig c;
    c.family = "llama";
    c.tied = false;
    c.param = c.reduce_dtype = param;
    const std::filesystem::path bin = build_cuda(std::string("llama_build_") + param, c.spec());
    ASSERT_TRUE(std::filesystem::exists(bin)) << param;
    CmdResult r = run_command(bin.string() + " --print-schedule");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("model.layers.0.self_attn.k_proj.weight (16, 32)"), std::string::npos)
        << r.out;  // 2 key/value heads of 8
  }
}

TEST(CudaBuild, OffloadBuildsAndPrintsItsSchedule) {
  E2eConfig single;
  single.world = 1;
  single.offload = "cpu";
  E2eConfig hybrid;
  hybrid.sharding = "hybrid_shard";
  hybrid.world = 4;
  hybrid.shard_group = 2;
  hybrid.param = hybrid.reduce_dtype = "bf16";
  hybrid.micro_batches = 2;
  hybrid.offload = "cpu";
  E2eConfig activations;  // checkpointed activations through the host too
  activations.world = 2;
  activations.recompute = "block";
  activations.offload = "cpu";
  activations.offload_activations = true;
  for (const E2eConfig& c : {single, hybrid, activations}) {
    std::filesystem::path bin = build_cuda("build_" + c.name(), c.spec());
    ASSERT_TRUE(std::filesystem::exists(bin)) << c.name();
    CmdResult printed = run_command(bin.string() + " --print-schedule");
    ASSERT_EQ(printed.status, 0) << printed.out;
    CmdResult planned = run_command(fmt::format("{} schedule {} --gpu h100-sxm", FSDPGEN_BIN,
                                                (bin.parent_path() / "e2e.fsdp").string()));
    ASSERT_EQ(planned.status, 0) << planned.out;
    EXPECT_EQ(printed.out, planned.out) << c.name();
    EXPECT_NE(printed.out.find(c.offload_activations ? "offload=cpu+activations" : "offload=cpu"),
              std::string::npos)
        << printed.out;
    EXPECT_NE(printed.out.find("stream host"), std::string::npos) << printed.out;
  }
}

TEST(CudaBuild, WithoutAGpuTheBinaryStopsWithTheReason) {
  const std::string reason = no_device_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is present here";
  E2eConfig c;
  c.world = 1;
  std::filesystem::path bin = build_cuda("no_gpu", c.spec());
  CmdResult r = run_binary(1, bin, "--steps 1");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("error:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda"), std::string::npos) << r.out;  // names the failing CUDA call
}

TEST(CudaBuild, UnsupportedSpecsAreErrors) {
  E2eConfig c;
  c.param = "bf16";
  c.reduce_dtype = "fp16";
  std::filesystem::path dir = e2e_dir("bf16_params_fp16_reduce");
  std::ofstream(dir / "e2e.fsdp") << c.spec();
  CmdResult r = run_command(
      fmt::format("cd {} && {} e2e.fsdp --target cuda -o train", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("the CUDA backend cannot build this spec: param = bf16 with reduce = fp16 "
                       "(mixing bf16 and fp16 is not supported"),
            std::string::npos)
      << r.out;
}

// A custom layer with CUDA entry points builds for the GPU wherever nvcc is
// (its .cu compiled by nvcc, linked in); one without them, or without the
// .cu that defines them, is refused naming the layer.
TEST(CudaBuild, CustomLayersBuildWithTheirCudaSources) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const std::filesystem::path dir = e2e_dir("custom_layer_build");
  CmdResult b =
      run_command(fmt::format("cd {} && {} examples/layers/gpt2-swiglu.fsdp --target cuda -o {}",
                              FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, (dir / "train").string()));
  ASSERT_EQ(b.status, 0) << b.out;
  CmdResult printed = run_command((dir / "train").string() + " --print-schedule");
  ASSERT_EQ(printed.status, 0) << printed.out;
  EXPECT_NE(printed.out.find("transformer.h.0.mlp.gate_w (344, 128)"), std::string::npos)
      << printed.out;
  auto refused = [](const std::string& name, const std::string& layers, const std::string& what) {
    E2eConfig c;
    c.layers = layers;
    const std::filesystem::path d = e2e_dir(name);
    std::ofstream(d / "e2e.fsdp") << c.spec();
    CmdResult r = run_command(
        fmt::format("cd {} && {} e2e.fsdp --target cuda -o train 2>&1", d.string(), FSDPGEN_BIN));
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find(what), std::string::npos) << r.out;
  };
  refused("custom_layer_no_cuda_entry",
          example_layers("gelu_mlp.h", "mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)"),
          "custom layer GeluMlp (the blocks' mlp) in");
  refused("custom_layer_no_cuda_source",
          example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)"),
          "names no CUDA source that defines them");
}

TEST(CudaBuild, CommAndProfileStepFlagsAreChecked) {
  E2eConfig c;
  c.world = 1;
  std::filesystem::path bin = build_cuda("comm_flag", c.spec());
  CmdResult r = run_binary(1, bin, "--comm gloo");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--comm"), std::string::npos) << r.out;
  // The profiled step must be one the run has (checked before anything starts).
  CmdResult past = run_binary(1, bin, "--steps 4 --profile-step 4");
  EXPECT_EQ(past.status, 2) << past.out;
  EXPECT_NE(past.out.find("--profile-step 4 is not below the number of steps: the run has 4 "
                          "steps, numbered from 0"),
            std::string::npos)
      << past.out;
}

// ---- training on a GPU -------------------------------------------------------

// Losses of the CUDA binary: ranks share the GPU through the MPI test mode
// when world > 1.
std::vector<double> cuda_losses(const std::string& name, const E2eConfig& c,
                                const std::string& extra = "") {
  std::filesystem::path bin = build_cuda(name, c.spec());
  std::string args = "--metrics metrics.jsonl " + extra;
  if (c.world > 1) args += " --comm mpi-test";
  CmdResult r = run_binary(c.world, bin, args);
  EXPECT_EQ(r.status, 0) << r.out;
  if (r.status != 0) return {};
  EXPECT_NE(r.out.find(": 0 by fsdpgen"), std::string::npos) << r.out;
  return read_losses(bin.parent_path() / "metrics.jsonl");
}

// Tolerances on each step's loss, CUDA against CPU. fp32: both compute in
// fp32 from the same weights and data (cuBLASLt without TF32); they differ in
// summation order only, ~1e-6 relative per op, growing a little over steps
// of AdamW: 1e-4. bf16: values are rounded to bf16 after every op on both
// sides, and one-ulp differences (2^-8 relative) in different places give
// losses that differ by ~1e-3: 2e-2, the CPU runtime's bf16 tolerance.
// fp16: the same with 2^-11 roundings: 5e-3, the CPU runtime's fp16
// tolerance.
double loss_tolerance(const E2eConfig& c) {
  return c.param == "fp32" ? 1e-4 : c.param == "fp16" ? 5e-3 : 2e-2;
}

class CudaTraining : public NeedsCudaDevice<::testing::TestWithParam<E2eConfig>> {};

TEST_P(CudaTraining, LossesEqualTheCpuBinarys) {
  const E2eConfig c = GetParam();
  if (!c.layers.empty()) FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const std::string name = "cuda_" + c.name();
  std::vector<double> cpu = train_losses("cpu_" + c.name(), c);
  std::vector<double> gpu = cuda_losses(name, c);
  ASSERT_EQ(cpu.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], loss_tolerance(c)) << "step " << i + 1;
    worst = std::max(worst, std::abs(gpu[i] - cpu[i]));
  }
  std::printf("[ measured ] %s: max |cuda - cpu| loss %.3g (tolerance %.0e)\n", c.name().c_str(),
              worst, loss_tolerance(c));
}

std::vector<E2eConfig> training_configs() {
  std::vector<E2eConfig> out;
  auto add = [&](std::string sharding, int world, int shard_group, std::string param) {
    E2eConfig c;
    c.sharding = std::move(sharding);
    c.world = world;
    c.shard_group = shard_group;
    c.param = param;
    c.reduce_dtype = param;
    out.push_back(c);
  };
  for (std::string p : {"fp32", "bf16"}) {
    for (std::string s : {"full_shard", "shard_grad_op", "no_shard"})
      for (int w : {1, 2})
        add(s, w, 0, p);
    for (std::string s : {"hybrid_shard", "hybrid_shard_zero2"})
      add(s, 4, 2, p);
  }
  // Accumulation, recompute and prefetch off on the GPU path too.
  E2eConfig acc;
  acc.micro_batches = 2;
  acc.reduce = "last";
  acc.recompute = "block";
  acc.forward_prefetch = false;
  acc.backward = "none";
  out.push_back(acc);
  E2eConfig hybrid_acc;
  hybrid_acc.sharding = "hybrid_shard";
  hybrid_acc.world = 4;
  hybrid_acc.shard_group = 2;
  hybrid_acc.param = "bf16";
  hybrid_acc.reduce_dtype = "bf16";
  hybrid_acc.micro_batches = 2;
  out.push_back(hybrid_acc);
  // offload = cpu: shards, gradient shards and optimizer state in pinned host
  // memory, the norm, the optimizer and the cross-replica all-reduce on the
  // host, against the CPU binary's offload run.
  auto offload = [&](std::string sharding, int world, int shard_group, std::string param,
                     int micro_batches) {
    E2eConfig c;
    c.sharding = std::move(sharding);
    c.world = world;
    c.shard_group = shard_group;
    c.param = c.reduce_dtype = std::move(param);
    c.micro_batches = micro_batches;
    c.offload = "cpu";
    out.push_back(c);
  };
  offload("full_shard", 1, 0, "fp32", 1);
  offload("full_shard", 2, 0, "fp32", 1);
  offload("hybrid_shard", 4, 2, "fp32", 1);
  offload("full_shard", 2, 0, "fp32", 4);    // accumulating into the host shard
  offload("full_shard", 2, 0, "bf16", 1);    // bf16 reduce-scatter widened into fp32 on the host
  offload("hybrid_shard", 4, 2, "bf16", 2);  // the host's fp32 accumulator reduced in bf16
  // fp16 with dynamic loss scaling: fp16 GEMMs, kernels and NCCL reductions
  // with the pre/post divide, against the CPU binary's fp16 run.
  add("full_shard", 1, 0, "fp16");
  add("full_shard", 2, 0, "fp16");
  add("hybrid_shard", 4, 2, "fp16");
  E2eConfig fp16_fp32_reduce;
  fp16_fp32_reduce.world = 2;
  fp16_fp32_reduce.param = "fp16";
  out.push_back(fp16_fp32_reduce);
  offload("full_shard", 2, 0, "fp16", 2);
  // Checkpointed activations through pinned host memory on the copy stream,
  // alone (fp32, bf16 with accumulation) and with the parameters' offload.
  for (auto [param, micro_batches, params_too] :
       {std::tuple{"fp32", 1, false}, {"bf16", 2, false}, {"fp32", 2, true}}) {
    E2eConfig c;
    c.world = 2;
    c.param = c.reduce_dtype = param;
    c.micro_batches = micro_batches;
    c.recompute = "block";
    c.offload_activations = true;
    if (params_too) c.offload = "cpu";
    out.push_back(c);
  }
  // Sub-block units (each linear): every strategy, recompute spanning a
  // block's units, activations and parameters through the host, fp16 (the
  // GPT-1T configuration), and explicit pieces beside whole blocks.
  for (std::string s :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"}) {
    E2eConfig c;
    c.units = "each linear";
    c.sharding = s;
    const bool hybrid = s.rfind("hybrid", 0) == 0;
    c.world = hybrid ? 4 : 2;
    c.shard_group = hybrid ? 2 : 0;
    c.param = c.reduce_dtype = s == "full_shard" ? "fp32" : "bf16";
    c.recompute = s == "no_shard" ? "none" : "block";
    out.push_back(c);
  }
  E2eConfig linear_1t;
  linear_1t.units = "each linear";
  linear_1t.param = linear_1t.reduce_dtype = "fp16";
  linear_1t.recompute = "block";
  linear_1t.offload = "cpu";
  linear_1t.offload_activations = true;
  linear_1t.optimizer = "sgd(lr = 0.1, momentum = 0)";
  out.push_back(linear_1t);
  E2eConfig pieces;
  pieces.units = "unit a [block 0, block 1.ln_1, block 1.attn]  unit b [block 2.mlp.c_fc]";
  pieces.recompute = "block";
  pieces.world = 4;
  out.push_back(pieces);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaTraining, ::testing::ValuesIn(training_configs()),
                         [](const auto& info) { return info.param.name(); });

// llama on the GPU (RMSNorm, rotary positions, SwiGLU, grouped-query flash
// attention) against the CPU binary: each strategy, fp32 and bf16,
// accumulation with recompute, and offload.
std::vector<E2eConfig> llama_configs() {
  std::vector<E2eConfig> out;
  for (std::string p : {"fp32", "bf16"})
    for (const auto& [s, w, g] : {std::tuple{"full_shard", 2, 0}, std::tuple{"no_shard", 1, 0},
                                  std::tuple{"hybrid_shard", 4, 2}}) {
      E2eConfig c;
      c.family = "llama";
      c.tied = false;
      c.sharding = s;
      c.world = w;
      c.shard_group = g;
      c.param = c.reduce_dtype = p;
      out.push_back(c);
    }
  E2eConfig acc;
  acc.family = "llama";
  acc.micro_batches = 2;
  acc.recompute = "block";
  out.push_back(acc);
  E2eConfig offload;
  offload.family = "llama";
  offload.offload = "cpu";
  out.push_back(offload);
  E2eConfig fp16;
  fp16.family = "llama";
  fp16.param = fp16.reduce_dtype = "fp16";
  out.push_back(fp16);
  for (std::string p : {"fp32", "bf16"}) {  // sub-block units, recompute spanning them
    E2eConfig linear;
    linear.family = "llama";
    linear.units = "each linear";
    linear.recompute = "block";
    linear.param = linear.reduce_dtype = p;
    linear.offload_activations = p == "bf16";
    out.push_back(linear);
  }
  return out;
}

// A custom layer (examples/layers/swiglu_mlp.h) with its CUDA entry points
// (swiglu_mlp.cu, compiled by nvcc into the program): the CUDA binary's
// losses equal the CPU binary's, which runs the layer's CPU entry points.
std::string swiglu_layers() {
  return example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)") +
         fmt::format("  cuda = \"{}/examples/layers/swiglu_mlp.cu\"\n", FSDPGEN_SOURCE_DIR);
}

std::vector<E2eConfig> custom_layer_configs() {
  std::vector<E2eConfig> out;
  E2eConfig c;  // full_shard on 2 ranks, recomputed
  c.layers = swiglu_layers();
  c.recompute = "block";
  out.push_back(c);
  c = {};
  c.layers = swiglu_layers();
  c.world = 1;
  c.param = c.reduce_dtype = "bf16";
  c.units = "each linear";
  out.push_back(c);
  c = {};
  c.family = "llama";
  c.layers = swiglu_layers();
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(CustomLayer, CudaTraining, ::testing::ValuesIn(custom_layer_configs()),
                         [](const auto& info) { return info.param.name(); });

INSTANTIATE_TEST_SUITE_P(Llama, CudaTraining, ::testing::ValuesIn(llama_configs()),
                         [](const auto& info) { return info.param.name(); });

// Padded vocabulary on the GPU (vocab 100 stored as 128 rows, the LM-head
// GEMMs over 128 columns, the cross-entropy over the true 100): per-step
// losses of the padded CUDA binary against the unpadded CUDA binary and the
// unpadded CPU binary, within loss_tolerance (cuBLASLt may pick other
// kernels for the wider GEMMs: summation order only, as CUDA against CPU).
class CudaPaddedVocab : public CudaTraining {};

TEST_P(CudaPaddedVocab, EqualsUnpadded) {
  E2eConfig padded = GetParam(), unpadded = GetParam();
  padded.vocab = unpadded.vocab = 100;
  padded.pad_vocab_to = 128;
  unpadded.pad_vocab_to = 1;
  const std::vector<double> cpu = train_losses("cpu_" + unpadded.name(), unpadded);
  const std::vector<double> plain = cuda_losses("cuda_" + unpadded.name(), unpadded);
  const std::vector<double> gpu = cuda_losses("cuda_" + padded.name(), padded);
  ASSERT_EQ(cpu.size(), static_cast<size_t>(padded.steps));
  ASSERT_EQ(plain.size(), cpu.size());
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], plain[i], loss_tolerance(padded)) << "step " << i + 1 << " vs unpadded";
    EXPECT_NEAR(gpu[i], cpu[i], loss_tolerance(padded)) << "step " << i + 1 << " vs cpu";
  }
}

std::vector<E2eConfig> padded_vocab_configs() {
  E2eConfig single;
  single.world = 1;
  E2eConfig bf16_hybrid;
  bf16_hybrid.sharding = "hybrid_shard";
  bf16_hybrid.world = 4;
  bf16_hybrid.shard_group = 2;
  bf16_hybrid.param = bf16_hybrid.reduce_dtype = "bf16";
  bf16_hybrid.tied = false;
  return {single, bf16_hybrid};
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaPaddedVocab, ::testing::ValuesIn(padded_vocab_configs()),
                         [](const auto& info) { return info.param.name(); });

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
