// Device: what the cuda tests share. Whether they can run here (every test
// that needs a GPU skips with no_device_reason() as its reason; CI has nvcc
// but no GPU), a fixture that does so with a stream of its own, and device
// copies of host vectors.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

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

// A test fixture (Base: ::testing::Test, or a TestWithParam) whose tests need
// a device: each skips, saying why, without one.
template <class Base = ::testing::Test>
class NeedsCudaDevice : public Base {
 protected:
  void SetUp() override {
    const std::string reason = no_device_reason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
  }
};

// Skips without a device; otherwise runs each test's kernels on its own stream.
class CudaFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = no_device_reason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
    CUDA_CHECK(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  void sync() { CUDA_CHECK(cudaStreamSynchronize(stream)); }

  cudaStream_t stream = nullptr;
};

// A device copy of a host vector, or n values whose every byte is `fill`
// (0: zeros; 0xff: NaN as fp32 and as bf16); freed with it.
template <class T>
class device_vec {
 public:
  explicit device_vec(const std::vector<T>& host) : n_(host.size()) {
    CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
  }
  explicit device_vec(int64_t n, int fill = 0) : n_(static_cast<size_t>(n)) {
    CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
    CUDA_CHECK(cudaMemset(ptr_, fill, bytes()));
  }
  ~device_vec() { cudaFree(ptr_); }
  device_vec(const device_vec&) = delete;
  device_vec& operator=(const device_vec&) = delete;

  T* get() { return static_cast<T*>(ptr_); }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  void* ptr_ = nullptr;
  size_t n_;
};
