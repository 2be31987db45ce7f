// backend (CUDA): the step on this rank's GPU (runtime/backend.h). One
// cudaMalloc of the planned arena (plus a guard region checked after every
// step), with offload one pinned cudaHostAlloc of the planned host arena
// (guarded too: shards, gradient shards and optimizer state, which the ops
// run on the host use), pinned host buffers for the step's tokens and
// scalars, a cuBLASLt handle whose workspace is the plan's gemm_workspace
// buffer, NCCL communicators (or the MPI test mode), and the executor of
// runtime/cuda/executor.h. Weights are initialized, loaded and saved on the
// host (runtime/train/weights.h) through a host copy of the persistent device
// buffers (the host arena's are used in place).
#pragma once

#include "runtime/backend.h"

std::unique_ptr<backend> make_cuda_backend(const program& p);
inline constexpr backend_kind kCudaBackend{"cuda", true, &make_cuda_backend};

// The generated main() of a CUDA program calls this.
int cuda_train_main(const program& p, int argc, char** argv);
