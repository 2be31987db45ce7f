// Memory: lifetimes from issue positions, then first-fit interval allocation
// in one arena per memory space.
#include "codegen/planner/Memory.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace fsdpgen {
namespace {

int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

struct Interval {
  int first = 0, last = 0;
  bool overlaps(const Interval& o) const { return first <= o.last && o.first <= last; }
};

// Each buffer's issue positions from its first use to its Free; persistent
// buffers, and buffers never used or never freed, to the end of the step.
std::vector<Interval> lifetimes(const Schedule& s) {
  const int last_pos = std::max(0, static_cast<int>(s.ops.size()) - 1);
  std::vector<Interval> life(s.buffers.size(), Interval{last_pos + 1, -1});
  std::vector<bool> freed(s.buffers.size(), false);
  for (const Op& op : s.ops) {
    for (int b : op.uses) {
      life[b].first = std::min(life[b].first, op.id);
      life[b].last = std::max(life[b].last, op.id);
    }
    for (int b : op.frees)
      life[b].last = std::max(life[b].last, op.id), freed[b] = true;
  }
  for (const Buffer& b : s.buffers) {
    Interval& l = life[b.id];
    if (b.persistent || l.last < 0) l = {0, last_pos};
    if (l.first > l.last) l.first = l.last;
    if (!freed[b.id]) l.last = last_pos;  // never freed: lives to the end of the step
  }
  return life;
}

// Places the buffers of one space; returns the arena size.
int64_t place(const Schedule& s, MemSpace space, const std::vector<Interval>& life,
              const MemoryOptions& opt, std::vector<Placement>& out) {
  std::vector<int> persistent, transient;
  for (const Buffer& b : s.buffers) {
    if (b.space != space) continue;
    (b.persistent ? persistent : transient).push_back(b.id);
  }
  const int64_t red = opt.red_zone_bytes;
  // The bytes a buffer takes: its data, aligned, between its red zones.
  auto footprint = [&](int id) { return align_up(s.buffers[id].bytes, opt.alignment) + 2 * red; };
  int64_t top = 0;
  for (int id : persistent) {
    out[id].offset = top + red;
    top += footprint(id);
  }
  const int64_t base = top;
  // Largest first, then earliest: the classic greedy-by-size order.
  std::sort(transient.begin(), transient.end(), [&](int a, int b) {
    if (s.buffers[a].bytes != s.buffers[b].bytes) return s.buffers[a].bytes > s.buffers[b].bytes;
    if (life[a].first != life[b].first) return life[a].first < life[b].first;
    return a < b;
  });
  std::vector<int> placed;
  int64_t arena = base;
  for (int id : transient) {
    const int64_t size = footprint(id);
    int64_t offset = base;
    if (opt.reuse) {
      std::vector<std::pair<int64_t, int64_t>> busy;  // [begin, end) of conflicting placed buffers
      for (int q : placed)
        if (life[q].overlaps(life[id]))
          busy.push_back({out[q].offset - red, out[q].offset - red + footprint(q)});
      std::sort(busy.begin(), busy.end());
      for (auto [b, e] : busy) {
        if (offset + size <= b) break;
        offset = std::max(offset, e);
      }
    } else {
      offset = arena;
    }
    out[id].offset = offset + red;
    arena = std::max(arena, offset + size);
    placed.push_back(id);
  }
  return arena;
}

// A size in MiB below 1 GiB, GiB below 1 TiB, else TiB; two decimals.
std::string size_text(int64_t bytes) {
  constexpr int64_t kMiB = 1LL << 20, kGiB = 1LL << 30, kTiB = 1LL << 40;
  const auto [unit_bytes, unit] = bytes < kGiB   ? std::pair{kMiB, "MiB"}
                                  : bytes < kTiB ? std::pair{kGiB, "GiB"}
                                                 : std::pair{kTiB, "TiB"};
  return fmt::format("{:.2f} {}", static_cast<double>(bytes) / static_cast<double>(unit_bytes),
                     unit);
}

}  // namespace

MemoryPlan plan_memory(const Schedule& s, const MemoryOptions& options) {
  const int n_ops = static_cast<int>(s.ops.size());
  const std::vector<Interval> life = lifetimes(s);
  MemoryPlan m;
  m.red_zone_bytes = options.red_zone_bytes;
  m.placements.resize(s.buffers.size());
  for (const Buffer& b : s.buffers)
    m.placements[b.id] = {b.id, 0, life[b.id].first, life[b.id].last};
  m.device_arena_bytes = place(s, MemSpace::Device, life, options, m.placements);
  m.host_arena_bytes = place(s, MemSpace::Host, life, options, m.placements);
  const size_t kinds = kBufferKindNames.size();
  m.peak_by_kind.assign(kinds, 0);
  m.total_by_kind.assign(kinds, 0);
  std::vector<int64_t> live(n_ops + 1, 0);  // device bytes live at each position (difference array)
  for (const Buffer& b : s.buffers) {
    if (b.space != MemSpace::Device) continue;
    m.naive_bytes += align_up(b.bytes, options.alignment);
    m.total_by_kind[static_cast<int>(b.kind)] += b.bytes;
    live[life[b.id].first] += b.bytes;
    live[life[b.id].last + 1] -= b.bytes;
  }
  int64_t cur = 0;
  for (int pos = 0; pos < n_ops; ++pos) {
    cur += live[pos];
    if (cur > m.live_peak_bytes) m.live_peak_bytes = cur, m.peak_op = pos;
  }
  for (const Buffer& b : s.buffers)
    if (b.space == MemSpace::Device && life[b.id].first <= m.peak_op &&
        m.peak_op <= life[b.id].last)
      m.peak_by_kind[static_cast<int>(b.kind)] += b.bytes;
  return m;
}

LivePeaks live_peaks(const Schedule& s, const MemoryOptions& options) {
  const std::vector<Interval> life = lifetimes(s);
  const int positions = std::max(1, static_cast<int>(s.ops.size()));
  // Footprints (as place() counts them) live at each position, per space
  // (difference arrays).
  std::vector<int64_t> device(positions + 1, 0), host(positions + 1, 0);
  for (const Buffer& b : s.buffers) {
    std::vector<int64_t>& live = b.space == MemSpace::Device ? device : host;
    const int64_t footprint = align_up(b.bytes, options.alignment) + 2 * options.red_zone_bytes;
    live[life[b.id].first] += footprint;
    live[life[b.id].last + 1] -= footprint;
  }
  LivePeaks p;
  int64_t on_device = 0, on_host = 0;
  for (int pos = 0; pos < positions; ++pos) {
    on_device += device[pos];
    on_host += host[pos];
    p.device_bytes = std::max(p.device_bytes, on_device);
    p.host_bytes = std::max(p.host_bytes, on_host);
  }
  return p;
}

std::string print_memory_plan(const Schedule& s, const MemoryPlan& m) {
  std::string out = fmt::format(
      "memory per rank: device arena {} ({} B); live peak {} at op #{} ({}); {} B without reuse\n",
      size_text(m.device_arena_bytes), m.device_arena_bytes, size_text(m.live_peak_bytes),
      m.peak_op, s.ops.empty() ? "-" : s.ops[m.peak_op].label(), m.naive_bytes);
  out += fmt::format(
      "memory reduced from {} to {} by reusing buffers whose lifetimes do not overlap\n",
      size_text(m.naive_bytes), size_text(m.device_arena_bytes));
  out += fmt::format("  {:<18} {:>14} {:>14}\n", "kind", "at peak (B)", "all (B)");
  for (size_t k = 0; k < kBufferKindNames.size(); ++k) {
    if (m.total_by_kind[k] == 0) continue;
    out += fmt::format("  {:<18} {:>14} {:>14}\n", kBufferKindNames[k], m.peak_by_kind[k],
                       m.total_by_kind[k]);
  }
  // The checkpoint staging buffer lives in the host arena for the whole run.
  bool offload = false, staging = false;
  for (const Buffer& b : s.buffers) {
    if (b.space != MemSpace::Host) continue;
    if (b.kind != BufferKind::CheckpointStaging) {
      offload = true;
      continue;
    }
    staging = true;
    out +=
        fmt::format("  {:<18} {:>14} {:>14} (host arena)\n", to_string(b.kind), b.bytes, b.bytes);
  }
  if (m.host_arena_bytes > 0)
    out += fmt::format("host arena ({}): {} ({} B)\n",
                       offload && staging ? "offload, checkpoint staging"
                       : staging          ? "checkpoint staging"
                                          : "offload",
                       size_text(m.host_arena_bytes), m.host_arena_bytes);
  if (m.red_zone_bytes > 0)
    out += fmt::format("red zones (--check): {} B before and after every buffer, included above\n",
                       m.red_zone_bytes);
  return out;
}

}  // namespace fsdpgen
