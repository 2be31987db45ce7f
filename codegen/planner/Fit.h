// Fit: whether a plan fits a device (the room its arenas have there), and
// the schedule options the device implies. Which configurations would fit
// when a plan does not: codegen/planner/Alternatives.h.
#pragma once

#include <cstdint>

#include "codegen/planner/Hardware.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "runtime/limits.h"

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

// Schedule options the target implies, by the runtime's limits
// (runtime/limits.h): a cuBLASLt workspace on GPUs, and flash attention
// (log-sum-exp saved, not probabilities) where the head size is at most
// kCudaAttentionFlashMaxHeadSize, with room in the workspace for cuDNN's
// fused attention when params are 16-bit and the head size a multiple of
// kCudnnAttentionHeadSizeMultiple up to kCudnnAttentionMaxHeadSize (whether
// or not the runtime was built with cuDNN: the plan does not depend on the
// machine that plans); on CPUs materialized attention probabilities and
// kCpuGemmWorkspaceBytes of workspace only for 16-bit params.
ScheduleOptions schedule_options_for(const Hardware& hw, const Spec& spec);

}  // namespace fsdpgen
