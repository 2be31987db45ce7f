// CudaE2e: what the tests of generated CUDA binaries (CudaBuildTest,
// CudaTrainingTest, CudaBinaryTest) share: building a spec for CUDA, the CUDA
// binary's losses, their tolerance against the CPU binary's, and the fixture
// of the tests that train on a GPU.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tests/cuda/Device.h"
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {

// Builds the spec for CUDA in work/NAME; returns the binary. With
// --allow-unrun: these tests are what first runs CUDA code that has not run
// on a GPU yet (codegen/planner/TargetSupport.h's unrun_features).
inline std::filesystem::path build_cuda(const std::string& name, const std::string& spec) {
  std::filesystem::path dir = e2e_dir(name);
  return build_binary(dir, spec, "cuda", "--allow-unrun");
}

// The llama options' families, each as E2e.h's small llama: Qwen2's biases,
// Qwen3's q/k norms and head size, Mistral's window, OLMo 2's post-norm
// block, Gemma's pieces, and Gemma 2's and 3's (sandwich norms, alternating
// windowed layers with their own rotary base, caps, query scalar). With
// `param` storage, full_shard at world 2.
inline std::vector<E2eConfig> llama_family_configs(const std::string& param) {
  std::vector<E2eConfig> out;
  for (int f = 0; f < 6; ++f) {
    E2eConfig c;
    c.family = "llama";
    c.tied = false;
    c.world = 2;
    c.param = c.reduce_dtype = param;
    c.qkv_bias = f == 0;
    c.qwen3 = f == 1;
    c.sliding_window = f == 2 ? 5 : 0;
    c.olmo2 = f == 3;
    c.gemma = f >= 4;
    c.gemma_sandwich = f == 5;
    out.push_back(c);
  }
  return out;
}

// Losses of the CUDA binary: ranks share the GPU through the MPI test mode
// when world > 1.
inline std::vector<double> cuda_losses(const std::string& name, const E2eConfig& c,
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
inline double loss_tolerance(const E2eConfig& c) {
  return c.param == "fp32" ? 1e-4 : c.param == "fp16" ? 5e-3 : 2e-2;
}

class CudaTraining : public NeedsCudaDevice<::testing::TestWithParam<E2eConfig>> {};

}  // namespace fsdpgen::test
