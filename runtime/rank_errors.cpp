// rank_errors: grouping the ranks' messages, and gathering them to rank 0
// (runtime/rank_errors.h).
#include "runtime/rank_errors.h"

#include <mpi.h>

#include <fmt/format.h>

#include <cstddef>
#include <map>

#include "runtime/check.h"
#include "runtime/human.h"

namespace {

// "rank 1", "ranks 0-3", "ranks 0, 2-3, 5" for sorted ranks.
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (const auto& [first, last] : rank_runs(ranks)) {
    out += fmt::format("{}{}", out.empty() ? "" : ", ", first);
    if (last > first) out += fmt::format("-{}", last);
  }
  return fmt::format("rank{} {}", ranks.size() == 1 ? "" : "s", out);
}

}  // namespace

std::string rank_errors_report(const std::vector<std::string>& by_rank) {
  std::vector<std::string> messages;              // distinct, in the order of their first rank
  std::map<std::string, std::vector<int>> ranks;  // each message's ranks
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r].empty()) continue;
    std::vector<int>& hit = ranks[by_rank[r]];
    if (hit.empty()) messages.push_back(by_rank[r]);
    hit.push_back(static_cast<int>(r));
  }
  if (messages.size() == 1 && ranks[messages[0]].size() == by_rank.size())
    return fmt::format("error: {}\n", messages[0]);
  std::string out;
  for (const std::string& m : messages)
    out += fmt::format("{}: error: {}\n", ranks_text(ranks[m]), m);
  return out;
}

std::string rank_errors_gather(const std::string& error) {
  int rank = 0, world = 1;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  const int length = static_cast<int>(error.size());
  std::vector<int> lengths(rank == 0 ? static_cast<size_t>(world) : 0);
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::vector<int> offsets(lengths.size());
  int total = 0;
  for (size_t r = 0; r < lengths.size(); ++r)
    offsets[r] = total, total += lengths[r];
  std::string all(static_cast<size_t>(total), '\0');
  MPI_CHECK(MPI_Gatherv(error.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                        MPI_CHAR, 0, MPI_COMM_WORLD));
  if (rank != 0) return "";
  std::vector<std::string> by_rank;
  for (size_t r = 0; r < lengths.size(); ++r)
    by_rank.push_back(all.substr(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r])));
  return rank_errors_report(by_rank);
}
