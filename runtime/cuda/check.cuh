// check (CUDA): CUDA_CHECK, the CUDA runtime's counterpart of MPI_CHECK
// (runtime/check.h). A failed call throws std::runtime_error naming the call,
// file and line, CUDA's error name and message, and a hint at the usual cause.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

// What usually causes err and what to try; empty when CUDA's message says it all.
inline const char* cuda_hint(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
      return "no GPU is visible to this process: check nvidia-smi and CUDA_VISIBLE_DEVICES";
    case cudaErrorInsufficientDriver:
      return "the NVIDIA driver is missing or older than this CUDA runtime: nvidia-smi shows "
             "the newest CUDA version the driver supports";
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: lower the micro-batch or sequence length, or shard over more "
             "ranks";
    case cudaErrorNoKernelImageForDevice:
      return "the kernels were not compiled for this GPU: reconfigure with "
             "-DCMAKE_CUDA_ARCHITECTURES=<its compute capability, e.g. 90a>";
    case cudaErrorUnsupportedPtxVersion:
      return "the embedded PTX is newer than the driver: update the driver or build real code for "
             "this GPU (CMAKE_CUDA_ARCHITECTURES)";
    case cudaErrorInvalidConfiguration:
      return "bad launch configuration: a grid or block dimension is zero or too large for these "
             "shapes";
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevicePointer:
      return "a pointer, size or copy direction is wrong: is the buffer on this device and large "
             "enough?";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
      return "a kernel accessed memory out of bounds; launches are asynchronous, so the faulty "
             "kernel may be an earlier one: rerun with CUDA_LAUNCH_BLOCKING=1 or under "
             "compute-sanitizer";
    default:
      return "";
  }
}

[[noreturn]] inline void cuda_fail(cudaError_t err, const char* call, const char* file, int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call +
                    " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
  const std::string hint = cuda_hint(err);
  if (!hint.empty()) msg += "; hint: " + hint;
  throw std::runtime_error(msg);
}

#define CUDA_CHECK(call)                                                                       \
  do {                                                                                         \
    cudaError_t cuda_check_err_ = (call);                                                      \
    if (cuda_check_err_ != cudaSuccess) cuda_fail(cuda_check_err_, #call, __FILE__, __LINE__); \
  } while (0)
