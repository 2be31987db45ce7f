// collectives: per-rank buffers from the schedule's payload. all_gather sends
// bytes/ranks per rank into bytes; reduce_scatter reduces bytes (elements of
// dtype) to bytes/ranks per rank; all_reduce reduces bytes; send_recv sends
// bytes to the next rank while it receives bytes from the previous one.
#include "runtime/calibrate/collectives.h"

#include <climits>
#include <random>

#include <fmt/format.h>

#include "runtime/check.h"
#include "runtime/comm.h"

namespace {

using fsdpgen::profile::CollectiveTime;

// What entry c moves: bytes (all_gather, send_recv) or elements of dtype.
int64_t elem_bytes_of(const CollectiveTime& c) {
  return c.op == "all_gather" || c.op == "send_recv" ? 1 : dtype_size(dtype_named(c.dtype));
}

// The elements (bytes for all_gather and send_recv) one call is given.
int64_t count_of(const CollectiveTime& c) {
  const int64_t elems = c.bytes / elem_bytes_of(c);
  return c.op == "all_reduce" || c.op == "send_recv" ? elems : elems / c.ranks;
}

}  // namespace

std::string collective_problem(const CollectiveTime& c, const rank_layout& l) {
  if (c.ranks > l.world)
    return fmt::format(
        "ranks: {} ranks, but the calibration runs on {} (run it with mpirun -n {} "
        "or more)",
        c.ranks, l.world, c.ranks);
  if (l.spanning(static_cast<int>(c.ranks), static_cast<int>(c.nodes)).empty())
    return fmt::format(
        "nodes: its {} ranks span {} node{}, but the calibration runs on {} node{} with {} or "
        "more ranks on each: run it on {} nodes or more with {} ranks or more on each (srun -N "
        "{} --ntasks-per-node {})",
        c.ranks, c.nodes, c.nodes == 1 ? "" : "s", l.nodes(), l.nodes() == 1 ? "" : "s",
        l.fewest_ranks_on_a_node(), c.nodes,
        (c.ranks + c.nodes - 1) / std::max<int64_t>(1, c.nodes), c.nodes,
        (c.ranks + c.nodes - 1) / std::max<int64_t>(1, c.nodes));
  const int64_t count = count_of(c);
  if (count < 1)
    return fmt::format("bytes: {} bytes of {} hold less than one element per rank", c.bytes,
                       c.dtype);
  if (count > INT_MAX)
    return fmt::format("bytes: {} elements per call exceed MPI's int count", count);
  return "";
}

collective_buffers collective_buffers_of(const CollectiveTime& c) {
  const int64_t count = count_of(c);
  const int64_t elem_bytes = elem_bytes_of(c);
  const int64_t gathered = count * c.ranks * elem_bytes, one = count * elem_bytes;
  return {count, c.op == "reduce_scatter" ? gathered : one, c.op == "all_gather" ? gathered : one};
}

collective_call::collective_call(const CollectiveTime& c, MPI_Comm group)
    : c_(c), group_(group), b_(collective_buffers_of(c)) {
  ranks_all_or_none(group, [&] {
    send_.emplace(b_.send_bytes);
    recv_.emplace(b_.recv_bytes);
  });
  const dtype_id t = dtype_named(c.dtype);
  if (collective_reduces(c)) {
    std::mt19937 rng(1234);
    fill_normal(send_->data(), t, b_.send_bytes / dtype_size(t), 1e-3f, rng);
  }
  MPI_CHECK(MPI_Comm_rank(group, &rank_));
  MPI_CHECK(MPI_Comm_size(group, &size_));
}

void collective_call::run() {
  const dtype_id t = dtype_named(c_.dtype);
  if (c_.op == "send_recv") {  // the comm layer's point to point, as muon_exchange's
    MPI_Request requests[2];
    comm_irecv(group_, recv_->data(), b_.count, (rank_ + size_ - 1) % size_, 0, requests[0]);
    comm_isend(group_, send_->data(), b_.count, (rank_ + 1) % size_, 0, requests[1]);
    comm_wait(requests[0]);
    comm_wait(requests[1]);
  } else if (c_.op == "all_gather")
    comm_all_gather(group_, send_->data(), recv_->data(), b_.count);
  else if (c_.op == "reduce_scatter")
    comm_reduce_scatter(group_, send_->data(), recv_->data(), b_.count, t);
  else
    comm_all_reduce(group_, send_->data(), recv_->data(), b_.count, t);
}

measurement measure_collective(const CollectiveTime& c, MPI_Comm group, const measure_options& o) {
  collective_call call(c, group);
  return measure(o, [&] {
    ranks_barrier(group);
    const double s = seconds_of([&] { call.run(); });
    return ranks_max(s, group);
  });
}
