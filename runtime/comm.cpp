// comm: MPI collectives with fp32, bf16 and fp16 sums (the 16-bit types
// through user reductions that add in fp32 and round once per element pair;
// an fp16 sum beyond 65504 is infinity, as on a GPU).
#include "runtime/comm.h"

#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <utility>

#include "runtime/check.h"
#include "runtime/poll.h"
#include "runtime/rank_errors.h"

void mpi_fail(int code, const char* call, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, msg, &len);
  throw std::runtime_error(fmt::format("{}:{}: {} failed: {}", file, line, call,
                                       std::string(msg, static_cast<size_t>(len))));
}

void agree_on_error(const std::string& error, const char* what) {
  int bad = error.empty() ? 0 : 1, any = 0;
  MPI_CHECK(MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (!any) return;
  std::string report = rank_errors_gather(error);
  if (bad) throw agreed_error(error, true, std::move(report));
  throw agreed_error(fmt::format("{} failed on another rank", what), false, std::move(report));
}

namespace {

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);
  bf16* b = static_cast<bf16*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = bf16_from_float(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

void fp16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const fp16* a = static_cast<const fp16*>(in);
  fp16* b = static_cast<fp16*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = fp16_from_float(fp16_to_float(a[i]) + fp16_to_float(b[i]));
}

struct mpi_types {
  MPI_Datatype half_type = MPI_DATATYPE_NULL;  // 16 opaque bits: bf16 or fp16
  MPI_Op bf16_sum_op = MPI_OP_NULL;
  MPI_Op fp16_sum_op = MPI_OP_NULL;
};

const mpi_types& types() {
  static const mpi_types t = [] {
    mpi_types m;
    MPI_CHECK(MPI_Type_contiguous(1, MPI_UINT16_T, &m.half_type));
    MPI_CHECK(MPI_Type_commit(&m.half_type));
    MPI_CHECK(MPI_Op_create(&bf16_sum, 1, &m.bf16_sum_op));
    MPI_CHECK(MPI_Op_create(&fp16_sum, 1, &m.fp16_sum_op));
    return m;
  }();
  return t;
}

MPI_Datatype datatype(dtype_id t) {
  return t == dtype_id::fp32 ? MPI_FLOAT : types().half_type;
}
MPI_Op sum_op(dtype_id t) {
  switch (t) {
    case dtype_id::fp32:
      return MPI_SUM;
    case dtype_id::bf16:
      return types().bf16_sum_op;
    case dtype_id::fp16:
      break;
  }
  return types().fp16_sum_op;
}

int count_of(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw runtime_error(fmt::format(
        "{} of {} elements exceeds MPI's int count; use a larger world or smaller units", what, n));
  return static_cast<int>(n);
}

}  // namespace

comm_groups comm_create(int64_t shard_group) {
  comm_groups g;
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  g.rank = rank;
  g.world = world;
  g.shard_group = shard_group;
  g.shard_rank = rank % shard_group;
  g.replica_rank = rank / shard_group;
  types();
  MPI_Comm shard = MPI_COMM_NULL, replica = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(rank / shard_group), rank, &shard));
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(rank % shard_group), rank, &replica));
  for (int s = 0; s < kStreamCount; ++s) {
    g.comm[s][static_cast<int>(comm_group::none)] = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &g.comm[s][static_cast<int>(comm_group::world)]));
    MPI_CHECK(MPI_Comm_dup(shard, &g.comm[s][static_cast<int>(comm_group::shard)]));
    MPI_CHECK(MPI_Comm_dup(replica, &g.comm[s][static_cast<int>(comm_group::replica)]));
  }
  MPI_CHECK(MPI_Comm_free(&shard));
  MPI_CHECK(MPI_Comm_free(&replica));
  return g;
}

void comm_destroy(comm_groups& g) {
  for (auto& per_stream : g.comm)
    for (MPI_Comm& c : per_stream)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

void comm_wait(MPI_Request& req) {
  poll_until(
      [&] {
        int done = 0;
        MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        return done != 0;
      },
      200, std::chrono::microseconds(5));
}

void comm_all_gather(MPI_Comm comm, const void* send, void* recv, int64_t bytes) {
  int n = count_of(bytes, "all-gather");
  MPI_Request req;
  MPI_CHECK(MPI_Iallgather(send, n, MPI_BYTE, recv, n, MPI_BYTE, comm, &req));
  comm_wait(req);
}

void comm_reduce_scatter(MPI_Comm comm, const void* send, void* recv, int64_t count, dtype_id t) {
  int n = count_of(count, "reduce-scatter");
  MPI_Request req;
  MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, n, datatype(t), sum_op(t), comm, &req));
  comm_wait(req);
}

void comm_all_reduce(MPI_Comm comm, const void* send, void* recv, int64_t count, dtype_id t) {
  int n = count_of(count, "all-reduce");
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, datatype(t), sum_op(t),
                           comm, &req));
  comm_wait(req);
}

void comm_isend(MPI_Comm comm, const void* data, int64_t bytes, int peer, int tag,
                MPI_Request& req) {
  MPI_CHECK(MPI_Isend(data, count_of(bytes, "send"), MPI_BYTE, peer, tag, comm, &req));
}

void comm_irecv(MPI_Comm comm, void* data, int64_t bytes, int peer, int tag, MPI_Request& req) {
  MPI_CHECK(MPI_Irecv(data, count_of(bytes, "receive"), MPI_BYTE, peer, tag, comm, &req));
}

void comm_broadcast(MPI_Comm comm, void* data, int64_t bytes, int root) {
  int n = count_of(bytes, "broadcast");
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(data, n, MPI_BYTE, root, comm, &req));
  comm_wait(req);
}
