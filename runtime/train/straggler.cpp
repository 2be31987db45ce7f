// straggler: per-kind op times, the straggler among ranks, and their gather.
#include "runtime/train/straggler.h"

#include <mpi.h>

#include <algorithm>
#include <numeric>

#include "runtime/check.h"
#include "runtime/trace.h"
#include "runtime/train/watchdog.h"

static_assert(sizeof(straggler_times) == sizeof(int64_t) * (1 + kOpKindCount),
              "gathered as int64 values");

namespace {

// The op kinds busy time adds up: a collective's time includes its wait for
// the other ranks, and a free is no work.
bool is_own_work(op_kind k) {
  return !op_kind_is_collective(k) && k != op_kind::free;
}

}  // namespace

straggler_times straggler_times_of(const program& p, const std::vector<int64_t>& start_ns,
                                   const std::vector<int64_t>& end_ns) {
  straggler_times t;
  int64_t first = INT64_MAX, last = 0;
  for (int i = 0; i < p.op_count; ++i) {
    const size_t at = static_cast<size_t>(i);
    first = std::min(first, start_ns[at]);
    last = std::max(last, end_ns[at]);
    t.kind_ns[static_cast<int>(p.ops[i].kind)] += end_ns[at] - start_ns[at];
  }
  t.step_ns = p.op_count > 0 ? last - first : 0;
  return t;
}

int64_t straggler_busy_ns(const straggler_times& t) {
  int64_t busy = 0;
  for (int k = 0; k < kOpKindCount; ++k)
    if (is_own_work(static_cast<op_kind>(k))) busy += t.kind_ns[k];
  return busy;
}

straggler_report straggler_find(const std::vector<straggler_times>& ranks) {
  std::vector<size_t> order(ranks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Busiest first; on a tie, the lower rank first (a deterministic choice).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return straggler_busy_ns(ranks[a]) > straggler_busy_ns(ranks[b]);
  });
  const straggler_times& slow = ranks[order.front()];
  // The median of n busy times, busiest first: position n / 2 (of two, the less busy).
  const straggler_times& median = ranks[order[order.size() / 2]];
  straggler_report r;
  r.rank = static_cast<int64_t>(order.front());
  r.median_rank = static_cast<int64_t>(order[order.size() / 2]);
  r.busy_s = static_cast<double>(straggler_busy_ns(slow)) / 1e9;
  r.median_busy_s = static_cast<double>(straggler_busy_ns(median)) / 1e9;
  r.step_s = static_cast<double>(slow.step_ns) / 1e9;
  int64_t most = INT64_MIN;
  for (int k = 0; k < kOpKindCount; ++k) {
    if (!is_own_work(static_cast<op_kind>(k))) continue;
    const int64_t lost = slow.kind_ns[k] - median.kind_ns[k];
    if (lost > most) most = lost, r.kind = static_cast<op_kind>(k);
  }
  r.lost_s = static_cast<double>(most) / 1e9;
  return r;
}

bool straggler_notable(const straggler_report& r) {
  return r.busy_s > 1.1 * r.median_busy_s;
}

straggler_gather::straggler_gather(int64_t world, bool lead)
    : lead_(lead), all_(lead ? static_cast<size_t>(world) : 0) {}

std::optional<straggler_report> straggler_gather::measure(const program& p,
                                                          const std::vector<int64_t>& start_ns,
                                                          const std::vector<int64_t>& end_ns) {
  const straggler_times mine = straggler_times_of(p, start_ns, end_ns);
  constexpr int kValues = 1 + kOpKindCount;
  {
    const watch_outside_step watched(kWatchStragglerGather, trace_clock_ns());
    MPI_CHECK(MPI_Gather(&mine, kValues, MPI_INT64_T, lead_ ? all_.data() : nullptr, kValues,
                         MPI_INT64_T, 0, MPI_COMM_WORLD));
  }
  if (!lead_) return std::nullopt;
  return straggler_find(all_);
}
