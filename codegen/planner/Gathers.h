// Gathers: which units' parameters the schedule builder has brought in
// (gathered over the shard group, or copied from the host), by which op,
// and the host-copy staging still waiting for its all-gather; with
// prefetch, which units it brings in ahead of their use.
#pragma once

#include <cstddef>
#include <vector>

#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/PersistentBuffers.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

class Gathers {
 public:
  // `persistent` is read when the first gather is issued (its shards).
  Gathers(const StepShape& shape, IssueOrder& issue, const PersistentBuffers& persistent);

  // Unit u's parameters for compute in `phase` ("fwd", "bwd", "step") of
  // micro-batch mb, unless they are already in.
  void gather(int u, const char* phase, int mb);
  // Frees unit u's gathered parameters, if any.
  void release(int u);
  // Prefetches the next units that `order` (segment indices) will use after
  // position `pos`, at most max_inflight - 1 ahead; strategies that free after
  // forward also keep the gathered blocks within max_inflight.
  void prefetch(const std::vector<int>& order, size_t pos, const char* phase, int mb);

  // The buffer a compute op of unit u reads its parameters from: the
  // gathered one, or the shard.
  int params_of(int u) const;
  // The op that brought unit u's parameters in (-1: none).
  int op(int u) const { return op_[u]; }
  // The staging still waiting to be freed; the list is left empty.
  std::vector<int> take_staging();

 private:
  int alive_blocks() const;

  const StepShape& shape_;
  IssueOrder& issue_;
  const PersistentBuffers& persistent_;
  std::vector<int> gathered_, op_;  // per unit
  std::vector<int> staging_;        // host-copy staging waiting for its all-gather
};

}  // namespace fsdpgen::schedule_builder
