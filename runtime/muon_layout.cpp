// muon_layout: the per-rank tables of optimizer = muon(...), from the
// program's matrices and the flat layout (program.h's shard_piece_of).
#include "runtime/muon_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace {

// The matrix's part in shard `rank` of its unit, as a transfer (false: none).
bool slice_in(const program_muon_matrix& m, int64_t shard_elems, int64_t rank, muon_transfer& t) {
  const program_tensor as_tensor{"", m.unit, m.offset_elems, m.rows, m.cols};
  shard_piece piece;
  if (!shard_piece_of(as_tensor, shard_elems, rank, piece)) return false;
  t.matrix_begin = piece.tensor_begin;
  t.elems = piece.tensor_end - piece.tensor_begin;
  t.shard_offset = piece.shard_offset;
  return true;
}

// [begin, end) of the shard, split where the decay ranges start and end.
void add_adamw_parts(std::vector<muon_shard_part>& parts, int64_t begin, int64_t end,
                     const int64_t* decay, int decay_count, int64_t& state) {
  int64_t pos = begin;
  while (pos < end) {
    bool decayed = false;
    int64_t next = end;
    for (int r = 0; r < decay_count; ++r) {
      const int64_t lo = decay[2 * r], hi = decay[2 * r + 1];
      if (pos >= lo && pos < hi) {
        decayed = true;
        next = std::min(next, hi);
      } else if (lo > pos) {
        next = std::min(next, lo);
      }
    }
    parts.push_back({pos, next, -1, decayed, state});
    state += next - pos;
    pos = next;
  }
}

}  // namespace

muon_layout muon_layout_of(const program& p, int64_t shard_rank,
                           const optimizer_decay_table& decay) {
  muon_layout out;
  out.units.resize(static_cast<size_t>(p.unit_count));
  const int64_t S = p.parallel.shard_group;
  size_t most_requests = 0;
  for (int u = 0; u < p.unit_count; ++u) {
    const program_unit& unit = p.units[u];
    muon_unit_layout& l = out.units[static_cast<size_t>(u)];
    std::vector<int64_t> owned(static_cast<size_t>(S), 0), muon_held(static_cast<size_t>(S), 0);
    std::vector<muon_transfer> mine;  // slices in this rank's shard, in shard order
    for (int k = 0; k < p.muon_matrix_count; ++k) {
      const program_muon_matrix& m = p.muon_matrices[k];
      if (m.unit != u) continue;
      if (m.owner < 0 || m.owner >= S)
        throw std::runtime_error(
            fmt::format("unit {}: a Muon matrix has owner {}, outside the shard group of {}",
                        unit.name, m.owner, S));
      owned[static_cast<size_t>(m.owner)] += m.elems();
      if (m.owner == shard_rank) l.owned.push_back(k);
      for (int64_t r = 0; r < S; ++r) {
        muon_transfer t;
        if (!slice_in(m, unit.shard_elems, r, t)) continue;
        t.matrix = k;
        muon_held[static_cast<size_t>(r)] += t.elems;
        if (r == shard_rank) mine.push_back(t);
        if (r == shard_rank && m.owner == shard_rank) {
          t.peer = static_cast<int>(r);
          l.local.push_back(t);
        } else if (r == shard_rank) {
          t.peer = m.owner;
          l.to_owners.push_back(t);
        } else if (m.owner == shard_rank) {
          t.peer = static_cast<int>(r);
          l.from_holders.push_back(t);
        }
      }
    }
    l.gathered_elems = *std::max_element(owned.begin(), owned.end());
    for (int64_t r = 0; r < S; ++r)
      l.state_stride =
          std::max(l.state_stride, unit.shard_elems - muon_held[static_cast<size_t>(r)]);
    std::sort(mine.begin(), mine.end(), [](const muon_transfer& a, const muon_transfer& b) {
      return a.shard_offset < b.shard_offset;
    });
    int64_t pos = 0, state = 0;
    const int64_t* ranges = decay.pointers[static_cast<size_t>(u)];
    const int count = decay.counts[static_cast<size_t>(u)];
    for (const muon_transfer& t : mine) {
      add_adamw_parts(l.parts, pos, t.shard_offset, ranges, count, state);
      l.parts.push_back({t.shard_offset, t.shard_offset + t.elems, t.matrix, false, 0});
      pos = t.shard_offset + t.elems;
    }
    add_adamw_parts(l.parts, pos, unit.shard_elems, ranges, count, state);
    if (unit.optimizer_state >= 0 && p.buffers[unit.optimizer_state].bytes != 8 * l.state_stride)
      throw std::runtime_error(fmt::format(
          "unit {}: the plan's AdamW state is {} B, but Muon's layout needs {} B (m and v of {} "
          "elements): the program's tables disagree",
          unit.name, p.buffers[unit.optimizer_state].bytes, 8 * l.state_stride, l.state_stride));
    most_requests = std::max(most_requests, l.to_owners.size() + l.from_holders.size());
  }
  out.gather_requests.assign(most_requests, MPI_REQUEST_NULL);
  out.scatter_requests.assign(most_requests, MPI_REQUEST_NULL);
  return out;
}

muon_matrix muon_matrix_of(const program_muon_matrix& m) {
  return {m.rows, m.cols, m.stored_transposed};
}

muon_settings muon_settings_of(const program& p, double lr) {
  const program_optimizer& o = p.train.optimizer;
  muon_settings s;
  s.lr = lr;
  s.momentum = o.momentum;
  s.nesterov = o.nesterov;
  s.ns_steps = static_cast<int>(o.ns_steps);
  s.ns_dtype = o.ns_dtype;
  s.weight_decay = o.weight_decay;
  s.adjust = o.adjust_lr;
  return s;
}
