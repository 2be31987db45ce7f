// Fit: whether a plan fits a device, and if not, which configurations at
// the same world would (tune's search, each planned in full so the figures
// are the planner's own).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/planner/Cost.h"
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

// A configuration of the spec that fits at its world, from tune's search.
struct Alternative {
  std::string change;  // tune's changes from the spec: "recompute = block, micro_batch = 2, ..."
  int64_t peak_bytes = 0;
  int64_t host_bytes = 0;  // the host arena (offload)
  double step_ms = 0;
  double tokens_per_s_per_gpu = 0;  // at the spec's world
  int64_t global_batch = 0;         // sequences per step
  bool batch_changed = false;       // global_batch is not the spec's (the row says so)
};

// How many alternatives fitting_alternatives gives at most.
inline constexpr int kAlternatives = 6;

// The configurations tune (codegen/planner/Tune.h) finds that fit `spec` at its own
// world, its reduce dtype and prefetch kept: those that keep the global
// batch (by micro_batch x micro_batches), or where none does, those that
// change it (flagged); fastest per token per GPU first, less one that only
// adds changes to a row before it. Empty if nothing fits at this world.
std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw);

}  // namespace fsdpgen
