// buffers: the host memory an entry runs on, allocated, zeroed (so every page
// is resident before timing, as in the runtime's arena) and filled with small
// random values like a trained model's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>

#include "runtime/dtype.h"

// Zeroed bytes on a 64-byte boundary; throws std::bad_alloc.
class host_buffer {
 public:
  explicit host_buffer(int64_t bytes) : bytes_(bytes) {
    const size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
    data_.reset(static_cast<std::byte*>(std::aligned_alloc(64, rounded > 0 ? rounded : 64)));
    if (!data_) throw std::bad_alloc();
    std::memset(data_.get(), 0, rounded);
  }
  std::byte* data() const { return data_.get(); }
  template <class X>
  X* as() const {
    return reinterpret_cast<X*>(data_.get());
  }
  int64_t bytes() const { return bytes_; }

 private:
  struct free_deleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, free_deleter> data_;
  int64_t bytes_;
};

// x[0, n) = N(0, stddev) samples, stored as X (float, bf16 or fp16).
template <class X>
void fill_normal(X* x, int64_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, stddev);
  for (int64_t i = 0; i < n; ++i)
    x[i] = from_float<X>(normal(rng));
}

// ids[0, n) uniform in [0, vocab).
inline void fill_token_ids(int32_t* ids, int64_t n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  for (int64_t i = 0; i < n; ++i)
    ids[i] = id(rng);
}

// x[0, n) of dtype t = N(0, stddev) samples.
inline void fill_normal(void* x, dtype_id t, int64_t n, float stddev, std::mt19937& rng) {
  if (t == dtype_id::bf16)
    fill_normal(static_cast<bf16*>(x), n, stddev, rng);
  else if (t == dtype_id::fp16)
    fill_normal(static_cast<fp16*>(x), n, stddev, rng);
  else
    fill_normal(static_cast<float*>(x), n, stddev, rng);
}

// The runtime's dtype of a profile's dtype name ("fp32", "bf16", "fp16").
inline dtype_id dtype_named(const std::string& name) {
  return name == "bf16" ? dtype_id::bf16 : name == "fp16" ? dtype_id::fp16 : dtype_id::fp32;
}
