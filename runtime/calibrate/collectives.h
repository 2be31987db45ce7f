// collectives: all-gather, reduce-scatter and all-reduce through the
// runtime's comm layer (runtime/comm.h) on the first `ranks` ranks of the
// world, with the payload counted as the schedule counts it; and send_recv,
// Muon's point-to-point exchange, as a ring shift of the comm layer's sends
// and receives (NCCL's on a GPU).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>

#include "runtime/calibrate/buffers.h"
#include "runtime/calibrate/measure.h"
#include "runtime/calibrate/ranks.h"
#include "runtime/profile/profile.h"

// Why entry `c` cannot run on these ranks (more ranks than the world, ranks
// on another number of nodes than it asks, a payload of less than one
// element per rank or more than MPI's int count), or "" when it can.
std::string collective_problem(const fsdpgen::profile::CollectiveTime& c, const rank_layout& l);

// Whether entry c reduces (its send buffer holds numbers of its dtype): not
// all_gather or send_recv, which move bytes.
inline bool collective_reduces(const fsdpgen::profile::CollectiveTime& c) {
  return c.op == "reduce_scatter" || c.op == "all_reduce";
}

// One rank's side of entry c: the count the comm layer's call takes (bytes
// for all_gather and send_recv, elements of dtype otherwise) and its
// buffers' bytes.
struct collective_buffers {
  int64_t count = 0;
  int64_t send_bytes = 0, recv_bytes = 0;
};
collective_buffers collective_buffers_of(const fsdpgen::profile::CollectiveTime& c);

// Entry c's buffers on one rank of `group` (allocated on every rank of it or
// none: ranks_all_or_none), and one call of it through the comm layer, as a
// training step's stream makes it.
class collective_call {
 public:
  collective_call(const fsdpgen::profile::CollectiveTime& c, MPI_Comm group);
  void run();

 private:
  fsdpgen::profile::CollectiveTime c_;
  MPI_Comm group_;
  collective_buffers b_;
  int rank_ = 0, size_ = 1;
  std::optional<host_buffer> send_, recv_;
};

// Called on every rank of `group` (ranks_group of the layout's spanning(c.ranks, c.nodes)): each
// run's time is the slowest rank's (the collective ends when it does), the same on all of them; a
// barrier before each run starts them together.
measurement measure_collective(const fsdpgen::profile::CollectiveTime& c, MPI_Comm group,
                               const measure_options& o);
