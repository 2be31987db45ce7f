// cublas_check (CUDA): CUBLAS_CHECK, check.cuh's CUDA_CHECK for cuBLASLt. A
// failed call throws std::runtime_error naming the call, file and line,
// cuBLAS's status name and message, and a hint at the usual cause. Plain C++.
#pragma once

#include <cublasLt.h>

#include <stdexcept>
#include <string>

// What usually causes status and what to try; empty when cuBLAS's message says it all.
inline const char* cublas_hint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the cuBLASLt handle is missing or was not created (cublasLtCreate), or no GPU is "
             "usable";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "a shape, leading dimension, stride or attribute is out of range: leading dimensions "
             "must be at least the rows of the column-major view, strides non-negative";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "cuBLASLt has no kernel for this combination of types, layouts, epilogue and "
             "alignment on this GPU";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "this GPU lacks a feature the chosen algorithm needs (e.g. bf16 before sm_80)";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the kernel failed to launch or run: an earlier asynchronous fault is likely; rerun "
             "with CUDA_LAUNCH_BLOCKING=1 or under compute-sanitizer";
    default:
      return "";
  }
}

[[noreturn]] inline void cublas_fail(cublasStatus_t status, const char* call, const char* file,
                                     int line) {
  std::string msg = std::string(file) + ":" + std::to_string(line) + ": " + call +
                    " failed: " + cublasLtGetStatusName(status) + " (" +
                    cublasLtGetStatusString(status) + ")";
  const std::string hint = cublas_hint(status);
  if (!hint.empty()) msg += "; hint: " + hint;
  throw std::runtime_error(msg);
}

#define CUBLAS_CHECK(call)                                          \
  do {                                                              \
    cublasStatus_t cublas_check_status_ = (call);                   \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS)              \
      cublas_fail(cublas_check_status_, #call, __FILE__, __LINE__); \
  } while (0)
