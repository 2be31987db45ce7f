// device (CUDA): the helpers the runtime's kernels share. Storage types as
// the device types their kernels read (bf16 as __nv_bfloat16, fp16 as __half) and their fp32
// conversions, warp and block reductions in a fixed order, and launch grids.
// Device code: included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/dtype.h"

// ---------------------------------------------------------------- storage types

// The device type holding a storage type's bits: float as float, bf16 as
// __nv_bfloat16, fp16 as __half.
template <class T>
struct device_storage {
  using type = T;
};
template <>
struct device_storage<bf16> {
  using type = __nv_bfloat16;
};
template <class T>
using device_t = typename device_storage<T>::type;
template <>
struct device_storage<fp16> {
  using type = __half;
};
static_assert(sizeof(__nv_bfloat16) == sizeof(bf16) && alignof(__nv_bfloat16) == alignof(bf16));
static_assert(sizeof(__half) == sizeof(fp16) && alignof(__half) == alignof(fp16));

// Storage pointers (float, bf16, fp16) viewed as the device types their kernels take.
template <class T>
device_t<T>* dev(T* p) {
  return reinterpret_cast<device_t<T>*>(p);
}
template <class T>
const device_t<T>* dev(const T* p) {
  return reinterpret_cast<const device_t<T>*>(p);
}

// A device value in fp32, and fp32 rounded to a device type: the device
// types' overloads of to_float and from_float (runtime/dtype.h, whose fp32
// ones serve both host and device).
__device__ inline float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ inline float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);  // round to nearest even, as bf16_from_float
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half_rn(x);  // round to nearest even, overflow to infinity, as fp16_from_float
}

// Element i of an array of dtype t, as fp32; and stored from fp32 (dtype_load
// and dtype_store of runtime/dtype.h on the device).
__device__ inline float load_as_float(const void* p, dtype_id t, int64_t i) {
  switch (t) {
    case dtype_id::fp32:
      return static_cast<const float*>(p)[i];
    case dtype_id::bf16:
      return to_float(static_cast<const __nv_bfloat16*>(p)[i]);
    case dtype_id::fp16:
      break;
  }
  return to_float(static_cast<const __half*>(p)[i]);
}
__device__ inline void store_from_float(void* p, dtype_id t, int64_t i, float v) {
  switch (t) {
    case dtype_id::fp32:
      static_cast<float*>(p)[i] = v;
      return;
    case dtype_id::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = from_float<__nv_bfloat16>(v);
      return;
    case dtype_id::fp16:
      static_cast<__half*>(p)[i] = from_float<__half>(v);
      return;
  }
}

// ---------------------------------------------------------------- reductions

constexpr int kWarp = 32;

struct sum_op {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane gets op over the warp's 32 values (butterfly; the same order on
// every lane). All 32 lanes must call it.
template <class Op>
__device__ inline float warp_reduce(float v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Every thread gets op over the block's values: each warp's, then the warps'
// in warp order. blockDim.x is a multiple of 32, at most 1024, and
// blockDim.y == 1; all threads must call it.
template <class Op>
__device__ inline float block_reduce(float v, Op op, float identity) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();  // an earlier call's readers are done with partial
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / kWarp) ? partial[lane] : identity;
  return warp_reduce(v, op);
}

// *sum += the sum of x[0, n) (times *scale, a device value, where given), by
// a kernel's one block: thread i adds x[i], x[i + blockDim.x], ... in order,
// then block_reduce; thread 0 writes.
__device__ inline void block_add_sum(float* sum, const float* x, int64_t n,
                                     const float* scale = nullptr) {
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += x[i];
  acc = block_reduce(acc, sum_op{}, 0.0f);
  if (threadIdx.x == 0) *sum += scale ? acc * *scale : acc;
}

// ---------------------------------------------------------------- launch grids

// a / b rounded up (a >= 0, b > 0): e.g. the blocks covering a values at b per block.
__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// A grid of (x, y, z) blocks as CUDA takes it. One too large for a launch
// (CUDA allows 2^31 - 1 x 65535 x 65535) throws, naming the calling line.
inline dim3 grid_dim(int64_t x, int64_t y = 1, int64_t z = 1, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  if (x > 0x7fffffff || y > 65535 || z > 65535)
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": a grid of " +
                             std::to_string(x) + " x " + std::to_string(y) + " x " +
                             std::to_string(z) +
                             " blocks is too large for one launch (CUDA allows at most "
                             "2147483647 x 65535 x 65535)");
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), static_cast<unsigned>(z));
}
