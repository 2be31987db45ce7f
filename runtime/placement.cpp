// placement: each rank's host, gathered, and checked against the plan's nodes.
#include "runtime/placement.h"

#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "runtime/check.h"
#include "runtime/human.h"

namespace {

// "rank 3", "ranks 0, 1", "ranks 0, 2", "ranks 0-2, 5" (sorted, distinct
// ranks; two in a row are listed, three or more a range).
std::string ranks_text(const std::vector<int64_t>& ranks) {
  std::string s;
  for (const auto& [first, last] : rank_runs(ranks)) {
    s += fmt::format("{}{}", s.empty() ? "" : ", ", first);
    if (last == first + 1)
      s += fmt::format(", {}", last);
    else if (last > first)
      s += fmt::format("-{}", last);
  }
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", s);
}

std::vector<std::vector<int64_t>> ranks_by_host(const rank_placement& pl) {
  std::vector<std::vector<int64_t>> by(pl.hosts.size());
  for (size_t r = 0; r < pl.host_of_rank.size(); ++r)
    by[static_cast<size_t>(pl.host_of_rank[r])].push_back(static_cast<int64_t>(r));
  return by;
}

bool even(const std::vector<std::vector<int64_t>>& by) {
  return std::all_of(by.begin(), by.end(),
                     [&](const auto& r) { return r.size() == by.front().size(); });
}

// The launch commands that place `plan` as planned.
std::string planned_launch(const placement_plan& plan, const std::string& binary) {
  const int64_t nodes = plan.world / plan.ranks_per_node;
  return fmt::format(
      "launch with: srun -N {} --ntasks-per-node {} --distribution=block --mpi=pmix {}, or "
      "mpirun -n {} --map-by ppr:{}:node --hostfile HOSTS {} (HOSTS naming {} with slots={} "
      "each)",
      nodes, plan.ranks_per_node, binary, plan.world, plan.ranks_per_node, binary,
      plural(nodes, "node"), plan.ranks_per_node);
}

}  // namespace

rank_placement placement_gather() {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  struct entry {
    char name[64];
    int32_t leader;  // the lowest world rank of this rank's shared-memory domain
  } mine{};
  if (const char* node = std::getenv("SLURMD_NODENAME"); node && *node)
    std::strncpy(mine.name, node, sizeof mine.name - 1);
  else
    ::gethostname(mine.name, sizeof mine.name - 1);
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local));
  int leader = rank;
  MPI_CHECK(MPI_Allreduce(&rank, &leader, 1, MPI_INT, MPI_MIN, local));
  MPI_CHECK(MPI_Comm_free(&local));
  mine.leader = leader;
  std::vector<entry> all(static_cast<size_t>(world));
  MPI_CHECK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE,
                          MPI_COMM_WORLD));

  rank_placement pl;
  std::vector<std::pair<std::string, int32_t>> keys;
  std::set<std::string> names, repeated;
  for (const entry& e : all) {
    std::pair<std::string, int32_t> key{std::string(e.name, strnlen(e.name, sizeof e.name)),
                                        e.leader};
    auto it = std::find(keys.begin(), keys.end(), key);
    if (it == keys.end()) {
      if (!names.insert(key.first).second) repeated.insert(key.first);
      keys.push_back(key);
      it = keys.end() - 1;
    }
    pl.host_of_rank.push_back(it - keys.begin());
  }
  for (const auto& [name, lead] : keys)
    pl.hosts.push_back(repeated.count(name) ? fmt::format("{}/{}", name, lead) : name);
  return pl;
}

std::string placement_describe(const rank_placement& pl) {
  const std::vector<std::vector<int64_t>> by = ranks_by_host(pl);
  const int64_t hosts = static_cast<int64_t>(by.size());
  if (even(by))
    return fmt::format("{} x {}", plural(hosts, "host"),
                       plural(static_cast<int64_t>(by.front().size()), "rank"));
  std::string s;
  for (size_t h = 0; h < by.size(); ++h)
    s += fmt::format(
        "{}{}: {}", h ? ", " : "", pl.hosts[h],
        h ? std::to_string(by[h].size()) : plural(static_cast<int64_t>(by[h].size()), "rank"));
  return fmt::format("{} ({})", plural(hosts, "host"), s);
}

std::string placement_ranks(const rank_placement& pl) {
  const std::vector<std::vector<int64_t>> by = ranks_by_host(pl);
  std::string s;
  for (size_t h = 0; h < by.size(); ++h)
    s += fmt::format("{}{}: {}", h ? "; " : "", pl.hosts[h], ranks_text(by[h]));
  return s;
}

std::string placement_banner(const rank_placement& pl, const placement_plan& plan) {
  const std::string here = placement_describe(pl);
  const int64_t nodes = plan.world / plan.ranks_per_node;
  const std::string planned =
      fmt::format("{} x {}", plural(nodes, "host"), plural(plan.ranks_per_node, "rank"));
  if (here == planned) return here;
  return fmt::format("{} (planned as {} x {})", here, plural(nodes, "node"),
                     plural(plan.ranks_per_node, "rank"));
}

std::string placement_check(const rank_placement& pl, const placement_plan& plan,
                            const std::string& binary) {
  if (pl.hosts.size() <= 1) return "";
  const std::vector<std::vector<int64_t>> by = ranks_by_host(pl);
  // "2 hosts x 2 ranks (node1: ranks 0, 2; ...)", "2 hosts (node1: ranks 0-2; ...)"
  const std::string where = fmt::format(
      "the ranks run on {} ({})",
      even(by) ? placement_describe(pl) : plural(static_cast<int64_t>(by.size()), "host"),
      placement_ranks(pl));
  for (const std::vector<int64_t>& ranks : by)
    if (static_cast<int64_t>(ranks.size()) != plan.ranks_per_node)
      return fmt::format(
          "placement: {}, but the plan puts {} on each node (ranks_per_node {}); {}; or plan "
          "for this placement (set ranks_per_node in the spec's parallel block and rebuild)",
          where, plural(plan.ranks_per_node, "rank"), plan.ranks_per_node,
          planned_launch(plan, binary));
  // Each shard group (consecutive ranks) spans no more hosts than its planned nodes.
  for (int64_t first = 0; first < plan.world; first += plan.shard_group) {
    std::set<int64_t> hosts, nodes;
    for (int64_t r = first; r < first + plan.shard_group; ++r) {
      hosts.insert(pl.host_of_rank[static_cast<size_t>(r)]);
      nodes.insert(r / plan.ranks_per_node);
    }
    if (hosts.size() <= nodes.size()) continue;
    std::vector<int64_t> group;
    for (int64_t r = first; r < first + plan.shard_group; ++r)
      group.push_back(r);
    std::string names;
    for (int64_t h : hosts)
      names += (names.empty() ? "" : ", ") + pl.hosts[static_cast<size_t>(h)];
    return fmt::format(
        "placement: {}, so shard group {} ({}) spans {} hosts ({}) where the plan has it on {} "
        "(ranks_per_node {}): its all-gathers and reduce-scatters would cross the links between "
        "hosts; {}",
        where, first / plan.shard_group, ranks_text(group), hosts.size(), names,
        nodes.size() == 1 ? std::string("one node") : plural(int64_t(nodes.size()), "node"),
        plan.ranks_per_node, planned_launch(plan, binary));
  }
  return "";
}
