// Fit: whether a plan fits a device, and if not, which changes would make it
// fit: activation recompute, a smaller micro-batch, more ranks, CPU offload,
// each re-planned in full so the figures are the planner's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/Cost.h"
#include "planner/Hardware.h"
#include "planner/Memory.h"
#include "planner/Schedule.h"

namespace fsdpgen {

// Device memory the runtime cannot plan: CUDA context, NCCL buffers, library
// handles (0 on a CPU).
int64_t reserved_bytes(const Hardware& hw);
int64_t usable_bytes(const Hardware& hw);
// The host arena's room on a GPU node: the rank's share of the node's RAM
// less a tenth for what the plan does not hold (the process, its libraries,
// MPI and the page cache of the data). On a CPU both arenas share one RAM:
// usable_bytes() holds them together.
int64_t usable_host_bytes(const Hardware& hw);
// Whether a plan's arenas fit the hardware: on a GPU the device arena in
// usable_bytes() and the host arena in usable_host_bytes(); on a CPU both
// in usable_bytes().
bool plan_fits(const MemoryPlan& m, const Hardware& hw);

// GEMM workspace of the CPU runtime when params are 16-bit (it converts
// tiles to fp32 there; runtime/gemm.h's kCpuGemmWorkspaceBytes).
inline constexpr int64_t kCpuGemmWorkspaceBytes = int64_t{6} << 20;

// The largest head size the CUDA runtime's flash attention kernels take
// (runtime/cuda/attention.h's kCudaAttentionFlashMaxHeadSize).
inline constexpr int64_t kGpuFlashMaxHeadDim = 256;
// Head sizes cuDNN's fused attention takes are multiples of this, up to the
// largest (runtime/cuda/cudnn_attention.h's kCudnnAttentionHeadSizeMultiple
// and kCudnnAttentionMaxHeadSize); larger heads run on the flash kernels.
inline constexpr int64_t kGpuCudnnHeadDimMultiple = 8;
inline constexpr int64_t kGpuCudnnMaxHeadDim = 128;

// Schedule options the target implies: a cuBLASLt workspace on GPUs, and
// flash attention (log-sum-exp saved, not probabilities) where the head size
// is at most kGpuFlashMaxHeadDim, with room in the workspace for cuDNN's
// fused attention when params are 16-bit and the head size a multiple of
// kGpuCudnnHeadDimMultiple up to kGpuCudnnMaxHeadDim (whether or not the runtime was built with
// cuDNN: the plan does not depend on the machine that plans); on CPUs materialized attention
// probabilities and a workspace only for 16-bit params.
ScheduleOptions schedule_options_for(const Hardware& hw, const Spec& spec);

struct PlanResult {
  Units units;
  Schedule schedule;
  MemoryPlan memory;
  Timeline timeline;
  bool fits = false;
};
PlanResult plan_for(const Spec& spec, const Hardware& hw);

struct Alternative {
  std::string change;  // "recompute = block", "micro_batch = 2", "world = 1024", "offload = cpu"
  int64_t peak_bytes = 0;
  int64_t host_bytes = 0;  // the host arena (offload)
  double step_ms = 0;
  double tokens_per_s = 0;
  bool fits = false;
};

// Single changes (and recompute combined with each) that make `spec` fit,
// best throughput first; empty if nothing tried fits.
std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw);

}  // namespace fsdpgen
