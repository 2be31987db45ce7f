// CudaBuildTest: generated CUDA binaries. Building needs no GPU, so the
// build tests run everywhere nvcc is (CI included): `--target cuda`
// compiles and links (with offload too), the binary prints the planned
// schedule, and without a GPU it stops with an error naming the CUDA problem
// (never a crash or a hang).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "tests/cuda/CudaE2e.h"

namespace fsdpgen::test {
namespace {

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

// The llama options' families (Qwen2, Qwen3, Mistral, OLMo 2, Gemma, Gemma 2
// and 3): their CUDA code has not run on a GPU, so a build is refused naming
// each such feature; --allow-unrun builds it (the generated program compiled
// and linked against the CUDA runtime), warning once per feature, and the
// binary prints its schedule.
TEST(CudaBuild, LlamaFamiliesBuildOnlyWithAllowUnrun) {
  for (const E2eConfig& c : llama_family_configs("bf16")) {
    const std::filesystem::path dir = e2e_dir("families_build_" + c.name());
    std::ofstream(dir / "e2e.fsdp") << c.spec();
    std::filesystem::remove(dir / "train");  // a former run's
    const std::string build =
        fmt::format("cd {} && {} e2e.fsdp --target cuda -o train", dir.string(), FSDPGEN_BIN);
    CmdResult refused = run_command(build);
    EXPECT_EQ(refused.status, 1) << refused.out;
    EXPECT_NE(refused.out.find("the CUDA backend cannot build this spec: "), std::string::npos)
        << refused.out;
    EXPECT_NE(refused.out.find("its CUDA twin has not run on a GPU yet"), std::string::npos)
        << refused.out;
    EXPECT_FALSE(std::filesystem::exists(dir / "train")) << c.name();
    CmdResult built = run_command(build + " --allow-unrun");
    ASSERT_EQ(built.status, 0) << built.out;
    EXPECT_NE(built.out.find("warning: e2e.fsdp: --allow-unrun: "), std::string::npos) << built.out;
    EXPECT_NE(built.out.find(" on GPUs: its CUDA code has not run on a GPU yet; compare the first "
                             "steps with the CPU target's"),
              std::string::npos)
        << built.out;
    EXPECT_EQ(built.out.find("error"), std::string::npos) << built.out;
    CmdResult printed = run_command((dir / "train").string() + " --print-schedule");
    EXPECT_EQ(printed.status, 0) << printed.out;
    EXPECT_NE(printed.out.find("model.layers.2.mlp.down_proj.weight"), std::string::npos)
        << printed.out;
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

}  // namespace
}  // namespace fsdpgen::test
