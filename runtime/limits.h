// limits: sizes the runtimes' kernels are built for, which the planner plans
// with (codegen/planner/Fit.h): one definition for both, so a plan cannot reserve a
// workspace or choose an attention kernel the runtime does not have. Free of
// MPI and CUDA: the planner and nvcc include it.
#pragma once

#include <cstdint>

// Bytes of workspace the CPU GEMM (runtime/cpu/gemm.h) needs for 16-bit operands:
// it converts tiles to fp32 there. The planner reserves this as the arena's
// workspace buffer when a CPU plan's params are 16-bit (none for fp32).
inline constexpr int64_t kCpuGemmWorkspaceBytes = int64_t{6} << 20;

// The largest head size C/H the CUDA flash attention kernels take
// (runtime/cuda/attention.h); the planner saves log-sum-exp instead of the
// probabilities for heads up to it, and refuses llama's wider heads on GPUs.
inline constexpr int64_t kCudaAttentionFlashMaxHeadSize = 256;

// Head sizes cuDNN's fused attention takes here (runtime/cuda/cudnn_attention.h):
// multiples of 8 (16-byte rows) up to 128, which every GPU this targets runs;
// the flash kernels take larger heads, up to kCudaAttentionFlashMaxHeadSize
// (GPT-1T's 160). The planner reserves cuDNN's workspace for 16-bit plans
// with these heads, whether or not the runtime was built with cuDNN.
inline constexpr int64_t kCudnnAttentionHeadSizeMultiple = 8;
inline constexpr int64_t kCudnnAttentionMaxHeadSize = 128;
// Muon's Newton-Schulz iterations, as torch.optim.Muon accepts them (fewer
// than 100): the spec's ns_steps and a profile's muon_ns entries are read
// within it, and runtime/cpu/muon.h runs any of them.
inline constexpr int64_t kMaxMuonNsSteps = 99;

// Text data is read as bytes, token ids 0 to 255: a model of this vocabulary
// is byte-level. The spec checker (dsl/Rules.cpp) and the data loader
// (runtime/train/data.cpp) refuse bytes into a smaller vocabulary always, and into
// a larger one (a tokenizer's: its tokens are what it should read) unless
// allowed.
inline constexpr int64_t kByteVocab = 256;

static_assert(kCudnnAttentionMaxHeadSize <= kCudaAttentionFlashMaxHeadSize,
              "the flash kernels take every head cuDNN does (FSDPGEN_ATTENTION=flash, or a build "
              "without cuDNN, runs them instead)");
