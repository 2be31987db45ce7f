// ranks: where the calibration's ranks run and how they wait for each other.
// Every wait polls with sleeps (runtime/poll.h), so that a rank that is not
// measuring leaves its core to those that are.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

struct rank_layout {
  int rank = 0, world = 1;
  int local_rank = 0, local_size = 1;  // on this rank's node
  std::vector<int> node_of;            // per world rank: its node, numbered by first rank
  std::vector<int> ranks_on_node;      // per node

  int nodes() const { return static_cast<int>(ranks_on_node.size()); }
  int fewest_ranks_on_a_node() const;
  // A group of `ranks` spanning `nodes` nodes as a plan places it: the first
  // ranks/nodes world ranks of each of the first `nodes` nodes; empty where
  // the nodes do not divide the ranks or a node has too few.
  std::vector<int> spanning(int ranks, int nodes) const;
};

// Collective over the world.
rank_layout ranks_discover();

// Polled collectives on `comm`.
void ranks_barrier(MPI_Comm comm);
double ranks_sum(double x, MPI_Comm comm);
double ranks_max(double x, MPI_Comm comm);
int64_t ranks_min(int64_t x, MPI_Comm comm);

// Collective over the world: the message of the lowest rank whose `error`
// is not empty, on every rank ("" when none is).
std::string ranks_first_error(const std::string& error);

// Thrown on the ranks of a group where another rank failed (that rank
// reports its own error; these report none).
struct peer_failed : std::runtime_error {
  peer_failed() : std::runtime_error("failed on another rank") {}
};

// Runs f() on every rank of `comm`; when it throws on any of them, it
// rethrows there and the others throw peer_failed, so that no rank goes on
// to wait in a collective for one that stopped.
void ranks_all_or_none(MPI_Comm comm, const std::function<void()>& f);

// These world ranks (ascending) as a communicator, MPI_COMM_NULL on the
// others (collective over the world).
MPI_Comm ranks_group(const std::vector<int>& members);
