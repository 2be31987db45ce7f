// placement: which host each rank runs on, against the plan's nodes.
// The plan puts ranks_per_node consecutive ranks on each node (ranks
// [k*ranks_per_node, (k+1)*ranks_per_node) on node k) and sizes its shard
// groups (consecutive ranks) so that a hybrid group is one node's ranks. A
// launch whose ranks span several hosts must place them so: every host runs
// ranks_per_node ranks, and no shard group spans more hosts than the plan's
// (a hybrid group's all-gathers and reduce-scatters would otherwise cross
// the slow links). One host is never refused: it has no slow link, and the
// tests run hybrid plans of several nodes on one machine.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct rank_placement {
  std::vector<std::string> hosts;     // host names, in the order of their first rank
  std::vector<int64_t> host_of_rank;  // by world rank: an index into hosts
};

struct placement_plan {
  int64_t world = 1, shard_group = 1, ranks_per_node = 1;
};

// Collective over MPI_COMM_WORLD: every rank's host. A host is what Slurm
// named the node (SLURMD_NODENAME, set in every task srun starts), else the
// host name; ranks of one name but different shared-memory domains
// (MPI_COMM_TYPE_SHARED) are different hosts, named NAME/LOWEST_RANK.
rank_placement placement_gather();

// "2 hosts x 2 ranks", "1 host x 4 ranks", "2 hosts (node1: 3 ranks, node2: 1)".
std::string placement_describe(const rank_placement& pl);
// Each host's ranks: "node1: ranks 0-1; node2: ranks 2-3".
std::string placement_ranks(const rank_placement& pl);
// The banner's words: placement_describe, with the plan's nodes where they
// differ ("1 host x 4 ranks (planned as 2 nodes x 2 ranks)").
std::string placement_banner(const rank_placement& pl, const placement_plan& plan);

// "" when the placement is the plan's (or on one host); else why not, naming
// where each rank runs and the srun and mpirun flags that place them as
// planned (`binary` is the command the flags run).
std::string placement_check(const rank_placement& pl, const placement_plan& plan,
                            const std::string& binary);
