// PersistentBuffers: the buffers that live across steps, issued before the
// step's first op and never freed: each unit's parameter shard, master
// weights and optimizer state (and, with offload, its host gradient shard,
// which Gradients keeps), the GEMM workspace, Muon's momentum and
// workspace, the rope tables, and the checkpoint's host staging.
#pragma once

#include <vector>

#include "codegen/planner/Gradients.h"
#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

struct PersistentBuffers {
  std::vector<int> shard, master, state;  // per unit (-1: none)
  int workspace = -1, rope = -1, muon_momentum = -1, muon_workspace = -1;
};

// Issues them, in this order: per unit its shard, master, state and host
// gradient shard; the workspace, Muon's, the rope tables, checkpoint staging.
PersistentBuffers persistent_buffers(const StepShape& shape, IssueOrder& issue,
                                     Gradients& gradients);

}  // namespace fsdpgen::schedule_builder
