// placement_check and the placement's words (runtime/placement.h), on
// placements written out; the gather itself runs under srun in
// tests/slurm/multihost.sh (case placement).
#include <gtest/gtest.h>

#include <string>

#include "runtime/placement.h"

namespace {

rank_placement placed(std::vector<std::string> hosts, std::vector<int64_t> host_of_rank) {
  return {std::move(hosts), std::move(host_of_rank)};
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

const placement_plan kHybrid2x2{4, 2, 2};  // world 4, shard group 2, 2 ranks per node

TEST(Placement, ThePlannedPlacementPasses) {
  const rank_placement block = placed({"node1", "node2"}, {0, 0, 1, 1});
  EXPECT_EQ(placement_check(block, kHybrid2x2, "./train"), "");
  EXPECT_EQ(placement_describe(block), "2 hosts x 2 ranks");
  EXPECT_EQ(placement_ranks(block), "node1: ranks 0, 1; node2: ranks 2, 3");
  EXPECT_EQ(placement_banner(block, kHybrid2x2), "2 hosts x 2 ranks");
  // full_shard over both nodes: one group spanning the 2 planned nodes.
  EXPECT_EQ(placement_check(block, {4, 4, 2}, "./train"), "");
  // A group planned over 2 nodes of 2 (shard group 4 of world 8) may span 2 hosts.
  EXPECT_EQ(placement_check(placed({"a", "b", "c", "d"}, {0, 0, 1, 1, 2, 2, 3, 3}), {8, 4, 2}, "t"),
            "");
}

TEST(Placement, OneHostIsNeverRefused) {
  // The test suite runs plans of several nodes (hybrid, ranks_per_node 2 of
  // world 4) on one machine: no slow link there, so no error.
  const rank_placement one = placed({"vm"}, {0, 0, 0, 0});
  EXPECT_EQ(placement_check(one, kHybrid2x2, "./train"), "");
  EXPECT_EQ(placement_banner(one, kHybrid2x2), "1 host x 4 ranks (planned as 2 nodes x 2 ranks)");
  EXPECT_EQ(placement_banner(one, {4, 4, 4}), "1 host x 4 ranks");
}

TEST(Placement, AShardGroupAcrossHostsIsNamedWithTheFlags) {
  // srun --distribution=cyclic: ranks 0, 2 on node1 and 1, 3 on node2.
  const rank_placement cyclic = placed({"node1", "node2"}, {0, 1, 0, 1});
  const std::string why = placement_check(cyclic, kHybrid2x2, "./train");
  EXPECT_TRUE(has(why, "the ranks run on 2 hosts x 2 ranks (node1: ranks 0, 2; node2: ranks 1, 3)"))
      << why;
  EXPECT_TRUE(has(why,
                  "shard group 0 (ranks 0, 1) spans 2 hosts (node1, node2) where the plan "
                  "has it on one node (ranks_per_node 2)"))
      << why;
  EXPECT_TRUE(has(why, "srun -N 2 --ntasks-per-node 2 --distribution=block --mpi=pmix ./train"))
      << why;
  EXPECT_TRUE(has(why, "mpirun -n 4 --map-by ppr:2:node --hostfile HOSTS ./train")) << why;
}

TEST(Placement, RanksPerHostOtherThanThePlansAreNamed) {
  const rank_placement uneven = placed({"node1", "node2"}, {0, 0, 0, 1});
  EXPECT_EQ(placement_describe(uneven), "2 hosts (node1: 3 ranks, node2: 1)");
  const std::string why = placement_check(uneven, {4, 4, 2}, "./train");
  EXPECT_TRUE(has(why,
                  "the ranks run on 2 hosts (node1: ranks 0-2; node2: rank 3), but the plan "
                  "puts 2 ranks on each node (ranks_per_node 2)"))
      << why;
  EXPECT_TRUE(has(why, "srun -N 2 --ntasks-per-node 2")) << why;
  // Even but not the plan's: 4 hosts of 1 for 2 nodes of 2.
  const std::string four =
      placement_check(placed({"a", "b", "c", "d"}, {0, 1, 2, 3}), {4, 4, 2}, "t");
  EXPECT_TRUE(has(four, "4 hosts x 1 rank")) << four;
  EXPECT_TRUE(has(four, "plan for this placement")) << four;
}

}  // namespace
