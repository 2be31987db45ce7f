// gpu: device memory and timing for the CUDA calibration: zeroed device
// buffers, random values uploaded from the host, and work timed by CUDA
// events on the stream it is issued to.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/calibrate/buffers.h"
#include "runtime/cuda/check.cuh"

// Zeroed device memory; throws (CUDA_CHECK) when the device has too little.
class device_buffer {
 public:
  explicit device_buffer(int64_t bytes) : bytes_(bytes) {
    CUDA_CHECK(cudaMalloc(&data_, static_cast<size_t>(bytes > 0 ? bytes : 1)));
    CUDA_CHECK(cudaMemset(data_, 0, static_cast<size_t>(bytes > 0 ? bytes : 1)));
  }
  ~device_buffer() { cudaFree(data_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* data() const { return data_; }
  template <class X>
  X* as() const {
    return static_cast<X*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_;
};

// dst[0, n) (device) = N(0, stddev) samples of dtype t.
inline void upload_normal(void* dst, dtype_id t, int64_t n, float stddev, std::mt19937& rng) {
  host_buffer staging(n * dtype_size(t));
  fill_normal(staging.data(), t, n, stddev, rng);
  CUDA_CHECK(cudaMemcpy(dst, staging.data(), static_cast<size_t>(staging.bytes()),
                        cudaMemcpyHostToDevice));
}

// ids[0, n) (device) uniform in [0, vocab).
inline void upload_token_ids(int32_t* ids, int64_t n, int64_t vocab, std::mt19937& rng) {
  std::vector<int32_t> staging(static_cast<size_t>(n));
  fill_token_ids(staging.data(), n, vocab, rng);
  CUDA_CHECK(cudaMemcpy(ids, staging.data(), static_cast<size_t>(n) * sizeof(int32_t),
                        cudaMemcpyHostToDevice));
}

// Seconds between two events recorded on `stream` around the work f() issues.
template <class F>
double gpu_seconds_of(cudaStream_t stream, F&& f) {
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  f();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return ms / 1e3;
}
