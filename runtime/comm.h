// comm: the collectives a schedule issues, on MPI communicators. Every
// stream gets its own duplicate of the world, shard-group and replica-group
// communicators, so that collectives on different streams (threads) never
// interleave on one communicator; each stream issues its collectives in the
// schedule's order, the same on every rank. Waiting polls with a short
// back-off so that a comm thread does not take a core from compute.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "runtime/dtype.h"
#include "runtime/program.h"

struct comm_groups {
  int64_t rank = 0, world = 1;
  int64_t shard_group = 1;   // S: ranks [g*S, (g+1)*S) form shard group g
  int64_t shard_rank = 0;    // position in the shard group (rank % S)
  int64_t replica_rank = 0;  // position in the replica group (rank / S)
  // comm[stream][group]; MPI_COMM_NULL for group none.
  MPI_Comm comm[kStreamCount][4];
};

// Creates the communicators (collective over the world).
comm_groups comm_create(int64_t shard_group);
void comm_destroy(comm_groups& g);

// Waits for a request without holding a core: a short spin, then sleeps
// with a growing back-off (runtime/poll.h).
void comm_wait(MPI_Request& req);

// recv (size * bytes) = every rank's send (bytes), in rank order.
void comm_all_gather(MPI_Comm comm, const void* send, void* recv, int64_t bytes);
// recv (count) = sum over ranks of this rank's count-element block of send (size * count).
void comm_reduce_scatter(MPI_Comm comm, const void* send, void* recv, int64_t count, dtype_id t);
// recv (count) = sum over ranks of send; send == recv reduces in place.
void comm_all_reduce(MPI_Comm comm, const void* send, void* recv, int64_t count, dtype_id t);
void comm_broadcast(MPI_Comm comm, void* data, int64_t bytes, int root);
// Point to point, started and left to the caller to comm_wait (Muon's
// exchanges of matrix slices); peer is a rank of comm.
void comm_isend(MPI_Comm comm, const void* data, int64_t bytes, int peer, int tag,
                MPI_Request& req);
void comm_irecv(MPI_Comm comm, void* data, int64_t bytes, int peer, int tag, MPI_Request& req);

// Collective over the world: throws agreed_error (check.h) on every rank if
// `error` is non-empty on any rank, so that no rank waits for one that
// stopped; rank 0's carries every rank's message, each said once
// (runtime/rank_errors.h), for it to print.
void agree_on_error(const std::string& error, const char* what);
