// Device: whether the cuda tests can run here. Every test that needs a GPU
// skips with no_device_reason() as its reason (CI has nvcc but no GPU).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "runtime/cuda/check.cuh"

// Empty when a CUDA device is usable; otherwise why not (CUDA's error and hint).
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    const std::string hint = cuda_hint(err);
    return cudaGetErrorString(err) + (hint.empty() ? "" : "; hint: " + hint);
  }
  if (count == 0) return "cudaGetDeviceCount found 0 devices";
  return "";
}
