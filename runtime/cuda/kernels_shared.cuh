// kernels_shared (CUDA): what the kernel files behind kernels.cuh share
// (encoder.cu, norms.cu, elementwise.cu, cross_entropy.cu,
// optimizer_kernels.cu): the elementwise kernels' block size, the clamped
// exp, and rows read in 16-byte packs.
#pragma once

#include "runtime/cuda/device.cuh"
#include "runtime/kernel_math.h"

// exp with its argument clamped (runtime/kernel_math.h), the CPU's twin by name.
__device__ inline float exp_clamped(float x) {
  return expf(fminf(fmaxf(x, kExpArgMin), kExpArgMax));
}

// Elementwise kernels take a thread per value, in blocks of this many.
constexpr int kElementwiseThreads = 256;

// 16 bytes of a row, read and written as one 128-bit access.
template <class D>
struct alignas(16) pack16 {
  static constexpr int kElems = 16 / sizeof(D);
  D v[kElems];
};
