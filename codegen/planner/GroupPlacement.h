// GroupPlacement: where a communication group's ranks sit on the nodes, as
// the plan places ranks (Lower.h: contiguous shard groups, replica groups
// shard_group apart), which the cost model prices (a ring crossing nodes) and
// calibration requests name (the nodes a measured group spans).
#pragma once

#include <cstdint>

#include "codegen/planner/Schedule.h"

namespace fsdpgen {

// n ranks over `nodes` nodes, at most `ranks_per_node` of them on one node.
struct GroupPlacement {
  int64_t ranks = 1;
  int64_t nodes = 1;
  int64_t ranks_per_node = 1;
};
GroupPlacement group_placement(const ParallelSpec& p, CommGroup g, int64_t ranks);

}  // namespace fsdpgen
