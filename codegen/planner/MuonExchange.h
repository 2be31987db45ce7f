// MuonExchange: Muon's step in the schedule (codegen/planner/Muon.h): each
// unit's matrices gathered to their owner ranks, orthogonalized there, and
// the updates scattered back to the shards; which buffers and ops hold
// each unit's part of that while the builder issues the optimizer.
#pragma once

#include <vector>

#include "codegen/planner/Gradients.h"
#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/PersistentBuffers.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

class MuonExchange {
 public:
  MuonExchange(const StepShape& shape, IssueOrder& issue, const PersistentBuffers& persistent,
               const Gradients& gradients);

  // Shard group > 1: unit u's owners gather their matrices' reduced
  // gradients from the shards that hold them.
  void gather(int u);
  // Unit u's owners orthogonalize their matrices once the step's gates
  // (the norm, the guard's loss) are known, and send each shard its updates.
  // Returns the op the unit's optimizer step waits for.
  int orthogonalize(int u, const std::vector<int>& gates);
  // Unit u's updates at their places in this rank's shard (-1: none yet).
  int update(int u) const { return update_[u]; }

 private:
  const StepShape& shape_;
  IssueOrder& issue_;
  const PersistentBuffers& persistent_;
  const Gradients& gradients_;
  std::vector<int> gathered_, update_, gather_op_;  // per unit
};

}  // namespace fsdpgen::schedule_builder
