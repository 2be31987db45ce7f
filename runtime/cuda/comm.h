// comm (CUDA): the collectives a schedule issues, on GPU memory; the
// counterpart of runtime/comm.h. Every collective is enqueued on the op's
// stream (gpu_exec::stream) on the communicator of that stream and group, so
// that collectives on different streams never share one.
//
// Two modes:
//  - nccl: one NCCL communicator per (stream, group) pair the program's ops
//    use; one GPU per rank. Collectives are asynchronous and capturable in a
//    CUDA graph. Communicators of different streams run concurrently, so
//    every rank must issue its collectives in the same order (the
//    schedule's issue order, from one host thread).
//  - mpi_test: a test mode for ranks sharing one GPU (NCCL refuses two ranks
//    on one device). Each collective copies device -> pinned host staging,
//    runs runtime/comm.h's MPI collective on the stream's MPI communicator and
//    copies back. Slow, host-synchronous, never capturable.
// Sums, not averages, as on CPU. Plain C++ (compiled by the host compiler in
// generated programs and by nvcc in the runtime).
#pragma once

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>

#include "runtime/comm.h"
#include "runtime/cuda/exec.h"
#include "runtime/dtype.h"
#include "runtime/program.h"

enum class gpu_comm_mode : int { nccl, mpi_test };

// One (stream, group) communicator. Everything a collective needs, so that
// an op passes this alone.
struct gpu_comm {
  gpu_comm_mode mode = gpu_comm_mode::nccl;
  ncclComm_t nccl = nullptr;     // nccl mode
  MPI_Comm mpi = MPI_COMM_NULL;  // mpi_test: runtime/comm.h's communicator of this stream and group
  int size = 1, rank = 0;        // in the group
  // mpi_test: the groups' pinned host staging (shared: collectives in this
  // mode are host-synchronous and issued from one host thread, so one is in
  // flight at a time): the send half, then the recv half.
  void* staging = nullptr;
  int64_t staging_bytes = 0;  // both halves
};

struct gpu_comm_groups {
  gpu_comm_mode mode = gpu_comm_mode::nccl;
  int64_t rank = 0, world = 1;
  int64_t shard_group = 1;   // S: ranks [g*S, (g+1)*S) form shard group g
  int64_t shard_rank = 0;    // rank % S
  int64_t replica_rank = 0;  // rank / S
  // comm[stream][group]; only the pairs some op of the program uses are
  // created (the others stay default: nccl == nullptr, mpi == MPI_COMM_NULL).
  gpu_comm comm[kStreamCount][4];
  void* staging = nullptr;  // mpi_test: pinned host (owned here)
  int64_t staging_bytes = 0;
};

// Selects this rank's GPU and makes it current (cudaSetDevice); returns its
// index among the visible devices (CUDA_VISIBLE_DEVICES applies). The local
// rank is this rank's position among the ranks on its node
// (MPI_COMM_TYPE_SHARED). nccl: device = local rank, which must be below the
// visible device count; mpi_test: local rank modulo the count. Collective
// over MPI_COMM_WORLD: when any rank cannot select a device, every rank
// throws (agreed_error) rather than leave the others waiting.
int gpu_select_device(gpu_comm_mode mode);

// Creates the communicators of every (stream, group) pair used by an op of p
// that runs on the GPU (op.group != none, not in p.host_ops); collective over
// MPI_COMM_WORLD, after
// gpu_select_device. mpi_comms: the CPU communicators (runtime/comm.h
// comm_create, same shard group) that mpi_test runs its collectives on.
// nccl: a world communicator from a unique id broadcast over MPI, split into
// the groups (ncclCommSplit). mpi_test: pinned staging of twice (send and
// recv) the largest of the collectives' payload_bytes and 4 bytes times any
// unit's padded_elems. A failure on any rank throws on every rank where it
// can (NCCL's own set-up may block when a peer stopped inside it).
gpu_comm_groups gpu_comm_create(const program& p, gpu_comm_mode mode, const comm_groups& mpi_comms);
// Frees the communicators and the staging. abort: ncclCommAbort, which also
// stops collectives still in flight (after a failure, when peers may never
// take part); otherwise each communicator is finalized (waiting for its
// collectives) and destroyed. Destroy CUDA graphs that captured collectives
// first. Best effort: never throws.
void gpu_comm_destroy(gpu_comm_groups& g, bool abort = false);
// Throws when any NCCL communicator of g has an asynchronous error (a peer
// died, a network failure): a rank waiting for a step can poll this.
void gpu_comm_check_async(const gpu_comm_groups& g);
// The communicator of (stream, group); throws when gpu_comm_create did not
// create it (no op of the program uses that pair).
const gpu_comm& gpu_comm_of(const gpu_comm_groups& g, stream_id s, comm_group group);

// recv (size * bytes) = every rank's send (bytes), in group rank order.
void comm_all_gather(const gpu_comm& c, const void* send, void* recv, int64_t bytes, gpu_exec& g);
// recv (count) = sum over ranks of this rank's count-element block of send (size * count).
void comm_reduce_scatter(const gpu_comm& c, const void* send, void* recv, int64_t count, dtype_id t,
                         gpu_exec& g);
// recv (count) = sum over ranks of send; send == recv reduces in place.
void comm_all_reduce(const gpu_comm& c, const void* send, void* recv, int64_t count, dtype_id t,
                     gpu_exec& g);

// NCCL_CHECK: a failed NCCL call throws std::runtime_error naming the call,
// file and line, NCCL's error name and message, its last warning, and a hint
// at the usual cause.
[[noreturn]] void nccl_fail(ncclResult_t r, const char* call, const char* file, int line);

#define NCCL_CHECK(call)                                                                     \
  do {                                                                                       \
    ncclResult_t nccl_check_rc_ = (call);                                                    \
    if (nccl_check_rc_ != ncclSuccess) nccl_fail(nccl_check_rc_, #call, __FILE__, __LINE__); \
  } while (0)
