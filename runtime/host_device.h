// host_device: FSDPGEN_HOST_DEVICE marks an inline function that the CPU
// runtime and the CUDA kernels (compiled by nvcc) share, one definition for
// both (llm.c's train_gpt2.c and .cu keep twin names; here they keep one body).
#pragma once

#if defined(__CUDACC__)
#define FSDPGEN_HOST_DEVICE __host__ __device__ inline
#else
#define FSDPGEN_HOST_DEVICE inline
#endif
