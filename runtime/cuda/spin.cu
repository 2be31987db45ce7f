// spin (CUDA): the --inject-stall kernel.
#include "runtime/cuda/spin.h"

#include <cstdint>

#include "runtime/cuda/check.cuh"

namespace {

__device__ uint64_t global_timer_ns() {
  uint64_t t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = global_timer_ns();
  while (global_timer_ns() - start < ns)
    __nanosleep(100000);  // 0.1 ms: the spinning thread takes next to nothing from a shared GPU
}

}  // namespace

void cuda_spin(cudaStream_t stream, double seconds) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(seconds * 1e9));
  CUDA_CHECK(cudaGetLastError());
}
