// Gradients: where each unit's gradient stands while the schedule builder
// issues the step: the unsharded gradients backward accumulates into, the
// shard they are reduced to, the op that finished the reduction (what the
// optimizer waits for), and the frees that wait for the next reduction.
#pragma once

#include <vector>

#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

class Gradients {
 public:
  Gradients(const StepShape& shape, IssueOrder& issue);

  // Unit u's unsharded gradients for micro-batch mb, a buffer issued at
  // their first backward (one per step when they accumulate unsharded).
  int unsharded(int u, int mb);
  // Reduction of unit u after its last backward in micro-batch mb (see
  // ScheduleBackward.cpp for what each strategy issues).
  void reduce(int u, int mb, int last_backward);

  int shard(int u) const { return shard_[u]; }
  // offload: the unit's gradient shard is a persistent host buffer.
  void set_host_shard(int u, int buffer) { shard_[u] = buffer; }
  int last_reduce(int u) const { return last_reduce_[u]; }
  // The frees still waiting for a reduction; the list is left empty.
  std::vector<int> take_pending();

 private:
  const StepShape& shape_;
  IssueOrder& issue_;
  std::vector<int> unsharded_, shard_, last_reduce_;  // per unit
  std::vector<int> pending_;                          // frees waiting for a reduction
};

}  // namespace fsdpgen::schedule_builder
