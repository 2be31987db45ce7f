// GroupPlacement: a group's nodes from the plan's placement rules.
#include "codegen/planner/GroupPlacement.h"

#include <algorithm>

#include "codegen/planner/Lower.h"

namespace fsdpgen {

GroupPlacement group_placement(const ParallelSpec& p, CommGroup g, int64_t ranks) {
  const int64_t node = std::max<int64_t>(1, p.ranks_per_node);
  GroupPlacement out{ranks, 1, ranks};
  auto spread = [&](int64_t per_node) {
    per_node = std::clamp<int64_t>(per_node, 1, ranks);
    out.ranks_per_node = per_node;
    out.nodes = std::max<int64_t>(2, (ranks + per_node - 1) / per_node);
  };
  switch (g) {
    case CommGroup::None:
      break;
    case CommGroup::Shard:  // contiguous ranks; a group no larger than a node may straddle two
      if (!shard_group_intra_node(p)) spread(ranks > node ? node : (ranks + 1) / 2);
      break;
    case CommGroup::Replica:  // ranks shard_group apart: node / shard_group of them share a node
      if (!replica_group_intra_node(p)) spread(p.shard_group >= node ? 1 : node / p.shard_group);
      break;
    case CommGroup::World:
      if (p.world > node) spread(node);
      break;
  }
  return out;
}

}  // namespace fsdpgen
