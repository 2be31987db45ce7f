// GemmExec: the cuda tests' fixture for code that runs GEMMs: a stream and
// cuBLASLt (handle, workspace, plan cache) in a gpu_exec, as the CUDA
// backend sets them up. Skips, saying why, without a device.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/exec.h"
#include "runtime/cuda/gemm.h"
#include "tests/cuda/Device.h"

class CudaGemmFixture : public ::testing::Test {
 protected:
  static constexpr int64_t kLtWorkspaceBytes = int64_t{32} << 20;

  void SetUp() override {
    const std::string reason = no_device_reason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
    CUDA_CHECK(cudaStreamCreate(&g.stream));
    CUBLAS_CHECK(cublasLtCreate(&g.lt));
    CUDA_CHECK(cudaMalloc(&g.lt_workspace, kLtWorkspaceBytes));
    g.lt_workspace_bytes = kLtWorkspaceBytes;
    g.gemms = gpu_gemm_cache_create();
  }
  void TearDown() override {
    if (g.gemms) gpu_gemm_cache_destroy(g.gemms);
    if (g.lt_workspace) cudaFree(g.lt_workspace);
    if (g.lt) cublasLtDestroy(g.lt);
    if (g.stream) cudaStreamDestroy(g.stream);
  }
  void sync() { CUDA_CHECK(cudaStreamSynchronize(g.stream)); }

  gpu_exec g;
};
