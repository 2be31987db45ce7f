// exec (CUDA): what a generated op issues its GPU work with. The executor
// (runtime/cuda/executor.h) sets `stream` to the op's stream before calling
// the op, so every launcher enqueues on the right stream and returns without
// waiting. Values that change from step to step (learning rate, step number,
// loss scale) are read by kernels from `scalars` in device memory, never
// passed by value, so that a step captured once as a CUDA graph replays with
// each step's values. Plain C++ (compiled by the host compiler in generated
// programs and by nvcc in the runtime).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

struct gpu_gemm_cache;  // runtime/cuda/gemm_plan.h: cuBLASLt algorithms chosen per shape
struct gpu_attention;   // runtime/cuda/cudnn_attention.h: cuDNN attention graphs per shape

// Per-step values in device memory (one struct, written by the executor
// before each step and read back after it).
struct gpu_step_scalars {
  // Inputs of the step (host -> device before it runs).
  float lr;           // this step's learning rate
  float t;            // 1-based step number (AdamW bias correction)
  float dloss_scale;  // d(loss)/d(per-token loss sum): loss_scale / tokens of the global batch
  float loss_scale;   // reduced gradients = loss_scale x the average gradient: fp16's dynamic
                      // scale x its post-divide factor (runtime/train/loss_scale.h); 1 otherwise
  // The loss-spike guard's limits (step_context's; +inf: off).
  float norm_limit = std::numeric_limits<float>::infinity();
  float loss_total_limit = std::numeric_limits<float>::infinity();
  // The step's losses count this many times (--inject-spike; 1: as they are).
  float loss_factor = 1;
  // Outputs (device -> host after it ran).
  float loss_sum;    // this rank's per-token losses summed over the step
  float norm_sq;     // gradient sum of squares: this rank's partial, then all-reduced (scaled by
                     // loss_scale^2); when not finite, the optimizer skipped the step
  float loss_total;  // the step's loss summed over every rank (the guard's all-reduce; 0: none)
};

struct gpu_exec {
  cudaStream_t stream = nullptr;  // the stream of the op being issued
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;    // cuBLASLt's (and cuDNN attention's) workspace: the plan's
  int64_t lt_workspace_bytes = 0;  // gemm_workspace buffer
  gpu_gemm_cache* gemms = nullptr;
  gpu_attention* attention = nullptr;   // set: 16-bit flash attention runs on cuDNN
  gpu_step_scalars* scalars = nullptr;  // device
  float* loss_scratch = nullptr;        // kReduceScratchFloats device floats (losses)
  float* norm_scratch = nullptr;        // kReduceScratchFloats device floats (gradient norm)
};

// Device floats each reduction scratch holds (one partial sum per block).
inline constexpr int64_t kReduceScratchFloats = 1024;
