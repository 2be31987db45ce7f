// ranks: node discovery, polled collectives, agreed errors.
#include "runtime/calibrate/ranks.h"

#include <algorithm>
#include <exception>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/placement.h"

namespace {

template <class X>
X reduce(X x, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  X out{};
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(&x, &out, 1, type, op, comm, &req));
  comm_wait(req);
  return out;
}

}  // namespace

int rank_layout::fewest_ranks_on_a_node() const {
  return *std::min_element(ranks_on_node.begin(), ranks_on_node.end());
}

rank_layout ranks_discover() {
  rank_layout l;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &l.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &l.world));
  // A node is a host as the training binary's placement check knows one
  // (runtime/placement.h: Slurm's node name, else the host name, split by
  // shared-memory domain), numbered by its first rank.
  const rank_placement pl = placement_gather();
  l.ranks_on_node.assign(pl.hosts.size(), 0);
  for (int r = 0; r < l.world; ++r) {
    const int node = static_cast<int>(pl.host_of_rank[static_cast<size_t>(r)]);
    if (r == l.rank) l.local_rank = l.ranks_on_node[static_cast<size_t>(node)];
    l.node_of.push_back(node);
    ++l.ranks_on_node[static_cast<size_t>(node)];
  }
  l.local_size = l.ranks_on_node[static_cast<size_t>(l.node_of[static_cast<size_t>(l.rank)])];
  return l;
}

void ranks_barrier(MPI_Comm comm) {
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm, &req));
  comm_wait(req);
}

double ranks_sum(double x, MPI_Comm comm) {
  return reduce(x, MPI_DOUBLE, MPI_SUM, comm);
}

double ranks_max(double x, MPI_Comm comm) {
  return reduce(x, MPI_DOUBLE, MPI_MAX, comm);
}

int64_t ranks_min(int64_t x, MPI_Comm comm) {
  return reduce(x, MPI_INT64_T, MPI_MIN, comm);
}

std::string ranks_first_error(const std::string& error) {
  int world = 1, rank = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  const int first = reduce(error.empty() ? world : rank, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world) return "";
  std::string message = error;
  int64_t length = static_cast<int64_t>(message.size());
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(&length, 1, MPI_INT64_T, first, MPI_COMM_WORLD, &req));
  comm_wait(req);
  message.resize(static_cast<size_t>(length));
  MPI_CHECK(
      MPI_Ibcast(message.data(), static_cast<int>(length), MPI_CHAR, first, MPI_COMM_WORLD, &req));
  comm_wait(req);
  return message;
}

void ranks_all_or_none(MPI_Comm comm, const std::function<void()>& f) {
  std::exception_ptr failure;
  try {
    f();
  } catch (...) {
    failure = std::current_exception();
  }
  const int64_t all_ok = ranks_min(failure ? 0 : 1, comm);
  if (failure) std::rethrow_exception(failure);
  if (!all_ok) throw peer_failed();
}

std::vector<int> rank_layout::spanning(int ranks, int nodes) const {
  if (nodes < 1 || ranks < nodes || ranks % nodes != 0 || nodes > this->nodes()) return {};
  const int per_node = ranks / nodes;
  std::vector<int> members, taken(static_cast<size_t>(nodes), 0);
  for (int r = 0; r < world; ++r) {
    const int node = node_of[static_cast<size_t>(r)];
    if (node < nodes && taken[static_cast<size_t>(node)] < per_node) {
      members.push_back(r);
      ++taken[static_cast<size_t>(node)];
    }
  }
  if (static_cast<int>(members.size()) != ranks) return {};
  return members;
}

MPI_Comm ranks_group(const std::vector<int>& members) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  const bool in = std::find(members.begin(), members.end(), rank) != members.end();
  MPI_Comm group = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, rank, &group));
  return group;
}
