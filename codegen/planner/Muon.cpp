// Muon: owners of Muon matrices balanced by Newton-Schulz FLOPs, and each
// rank's slice of each matrix.
#include "codegen/planner/Muon.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "codegen/planner/Lower.h"
#include "dsl/Layers.h"
#include "runtime/muon_math.h"
#include "runtime/program.h"

namespace fsdpgen {
namespace {

void check_inputs(const std::vector<MuonMatrix>& matrices, int64_t shard_elems, int64_t shard_group,
                  int64_t ns_steps, const std::vector<double>& prior) {
  if (shard_group < 1)
    throw std::invalid_argument(
        fmt::format("muon owners: shard group of {} ranks (at least 1)", shard_group));
  if (ns_steps < 0)
    throw std::invalid_argument(fmt::format("muon owners: ns_steps {} is negative", ns_steps));
  if (!prior.empty() && static_cast<int64_t>(prior.size()) != shard_group)
    throw std::invalid_argument(fmt::format(
        "muon owners: {} prior loads for a shard group of {} ranks", prior.size(), shard_group));
  const int64_t flat = shard_elems * shard_group;
  for (const MuonMatrix& m : matrices) {
    if (m.rows < 1 || m.cols < 1)
      throw std::invalid_argument(
          fmt::format("muon owners: matrix {} of shape ({}, {}): both sides must be positive",
                      m.name, m.rows, m.cols));
    if (m.offset_elems < 0 || m.offset_elems + m.elems() > flat)
      throw std::invalid_argument(fmt::format(
          "muon owners: matrix {} at [{}, {}) lies outside the unit's flat parameter "
          "of {} elements ({} ranks x {})",
          m.name, m.offset_elems, m.offset_elems + m.elems(), flat, shard_group, shard_elems));
  }
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return matrices[a].offset_elems < matrices[b].offset_elems;
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const MuonMatrix& a = matrices[order[i - 1]];
    const MuonMatrix& b = matrices[order[i]];
    if (a.offset_elems + a.elems() > b.offset_elems)
      throw std::invalid_argument(fmt::format(
          "muon owners: matrices {} at [{}, {}) and {} at [{}, {}) overlap", a.name, a.offset_elems,
          a.offset_elems + a.elems(), b.name, b.offset_elems, b.offset_elems + b.elems()));
  }
}

// The ranks whose shards hold part of m, in rank order (check_inputs has
// made sure that m lies inside the flat parameter, so shard_elems > 0). Each
// part is the runtime's own (runtime/program.h's shard_piece_of, which
// runtime/muon_layout splits the matrices by): one owner of the split.
std::vector<MuonSlice> slices_of(const MuonMatrix& m, int64_t shard_elems) {
  std::vector<MuonSlice> out;
  const program_tensor as_tensor{"", 0, m.offset_elems, m.rows, m.cols};
  shard_piece piece;
  for (int64_t r = m.offset_elems / shard_elems; r * shard_elems < m.offset_elems + m.elems(); ++r)
    if (shard_piece_of(as_tensor, shard_elems, r, piece))
      out.push_back({r, piece.tensor_begin, piece.tensor_end, piece.shard_offset});
  return out;
}

int64_t held_by(const std::vector<MuonSlice>& slices, int64_t rank) {
  for (const MuonSlice& s : slices)
    if (s.rank == rank) return s.end - s.begin;
  return 0;
}

}  // namespace

double muon_ns_flops(int64_t rows, int64_t cols, int64_t ns_steps) {
  const double m = static_cast<double>(std::min(rows, cols));
  const double n = static_cast<double>(std::max(rows, cols));
  return static_cast<double>(ns_steps) * (4.0 * m * m * n + 2.0 * m * m * m);
}

MuonAssignment assign_muon_owners(const std::vector<MuonMatrix>& matrices, int64_t shard_elems,
                                  int64_t shard_group, int64_t ns_steps,
                                  const std::vector<double>& prior_flops) {
  check_inputs(matrices, shard_elems, shard_group, ns_steps, prior_flops);
  MuonAssignment a;
  a.rank_flops = prior_flops.empty() ? std::vector<double>(static_cast<size_t>(shard_group), 0.0)
                                     : prior_flops;
  for (const MuonMatrix& m : matrices)
    a.matrices.push_back({0, muon_ns_flops(m.rows, m.cols, ns_steps), slices_of(m, shard_elems)});
  // Largest first; equal costs in input order, so that the answer depends
  // only on the input.
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return a.matrices[x].ns_flops > a.matrices[y].ns_flops;
  });
  for (size_t i : order) {
    MuonOwner& o = a.matrices[i];
    int64_t best = 0;
    for (int64_t r = 1; r < shard_group; ++r) {
      const double lr = a.rank_flops[static_cast<size_t>(r)];
      const double lb = a.rank_flops[static_cast<size_t>(best)];
      if (lr < lb || (lr == lb && held_by(o.slices, r) > held_by(o.slices, best))) best = r;
    }
    o.owner = best;
    a.rank_flops[static_cast<size_t>(best)] += o.ns_flops;
  }
  return a;
}

std::string print_muon_assignment(const std::vector<MuonMatrix>& matrices,
                                  const MuonAssignment& a) {
  std::string out;
  for (size_t i = 0; i < matrices.size(); ++i) {
    const MuonMatrix& m = matrices[i];
    const MuonOwner& o = a.matrices[i];
    out += fmt::format("{} ({}, {}) owner {}, {:.3g} GFLOP, slices", m.name, m.rows, m.cols,
                       o.owner, o.ns_flops / 1e9);
    for (const MuonSlice& s : o.slices)
      out += fmt::format(" r{} [{}, {})", s.rank, s.begin, s.end);
    out += "\n";
  }
  out += "Newton-Schulz GFLOP per rank:";
  for (double f : a.rank_flops)
    out += fmt::format(" {:.3g}", f / 1e9);
  return out + "\n";
}

std::vector<MuonMatrix> muon_matrices(const Units& units, int unit) {
  const ModelSpec& m = units.spec.model;
  const model::ParamLayout& layout = param_layout(m);
  const model::Dims d = model_dims(m);
  const FlatUnit& u = units.units[static_cast<size_t>(unit)];
  std::vector<MuonMatrix> out;
  for (const LayerId& l : u.layers) {
    if (l.kind != LayerId::Kind::Block) continue;
    const std::string prefix = fmt::format(fmt::runtime(layout.block_prefix), l.block);
    for (size_t k = 0; k < layout.pieces.count; ++k) {
      const model::Piece& piece = layout.pieces[k];
      if (!piece.linear() || (l.piece >= 0 && static_cast<size_t>(l.piece) != k)) continue;
      const std::string name = prefix + layout.block[piece.first_tensor].hf_name;
      const auto t = std::find_if(u.tensors.begin(), u.tensors.end(),
                                  [&](const FlatTensor& x) { return x.name == name; });
      if (t == u.tensors.end()) continue;  // a custom layer took the piece's place
      const int64_t in = piece.in(d), out_features = piece.out(d);
      out.push_back({t->name, t->shape[0], t->shape[1], t->offset_elems,
                     in != out_features && t->shape[0] == in && t->shape[1] == out_features});
    }
    // Custom layers' matrices that their headers give Muon (Param's Optimizer).
    for (const CustomLayerSpec& c : m.custom)
      for (const CustomTensorSpec& p : c.params) {
        if (p.muon == CustomTensorSpec::Muon::None) continue;
        const std::string name = prefix + c.module + "." + p.name;
        const auto t = std::find_if(u.tensors.begin(), u.tensors.end(),
                                    [&](const FlatTensor& x) { return x.name == name; });
        if (t == u.tensors.end() || t->shape.size() != 2) continue;  // in another unit
        out.push_back({t->name, t->shape[0], t->shape[1], t->offset_elems,
                       p.muon == CustomTensorSpec::Muon::InOut});
      }
  }
  std::sort(out.begin(), out.end(), [](const MuonMatrix& a, const MuonMatrix& b) {
    return a.offset_elems < b.offset_elems;
  });
  return out;
}

MuonPlan plan_muon(const Units& units, int64_t ns_steps) {
  MuonPlan plan;
  const size_t n = units.units.size();
  plan.matrices.resize(n);
  plan.owners.resize(n);
  const int64_t S = units.spec.parallel.shard_group;
  std::vector<double> loads(static_cast<size_t>(S), 0.0);
  for (size_t k = n; k-- > 0;) {
    plan.matrices[k] = muon_matrices(units, static_cast<int>(k));
    plan.owners[k] =
        assign_muon_owners(plan.matrices[k], units.units[k].shard_elems, S, ns_steps, loads);
    loads = plan.owners[k].rank_flops;
  }
  // Each owner's momentum in unit order, then matrix order; its gathered
  // matrices of a unit in matrix order.
  std::vector<int64_t> momentum(static_cast<size_t>(S), 0);
  for (size_t k = 0; k < n; ++k) {
    std::vector<int64_t> gathered(static_cast<size_t>(S), 0);
    for (size_t i = 0; i < plan.matrices[k].size(); ++i) {
      MuonOwner& o = plan.owners[k].matrices[i];
      const size_t r = static_cast<size_t>(o.owner);
      o.momentum_offset = momentum[r];
      o.gathered_offset = gathered[r];
      momentum[r] += plan.matrices[k][i].elems();
      gathered[r] += plan.matrices[k][i].elems();
    }
  }
  return plan;
}

MuonUnit muon_unit(const MuonPlan& plan, int unit, int64_t shard_elems, int64_t shard_group) {
  const size_t S = static_cast<size_t>(shard_group);
  std::vector<int64_t> owned(S, 0), sent(S, 0), received(S, 0), held(S, 0);
  MuonUnit out;
  std::vector<double> flops(S, 0.0);
  const size_t u = static_cast<size_t>(unit);
  for (size_t i = 0; i < plan.matrices[u].size(); ++i) {
    const MuonOwner& o = plan.owners[u].matrices[i];
    const size_t owner = static_cast<size_t>(o.owner);
    owned[owner] += plan.matrices[u][i].elems();
    flops[owner] += o.ns_flops;
    for (const MuonSlice& sl : o.slices) {
      const size_t r = static_cast<size_t>(sl.rank);
      held[r] += sl.end - sl.begin;
      if (r == owner) continue;
      sent[r] += sl.end - sl.begin;
      received[owner] += sl.end - sl.begin;
    }
  }
  out.adamw_elems = shard_group > 0 ? shard_elems - held[0] : 0;
  for (size_t r = 0; r < S; ++r) {
    out.gathered_elems = std::max(out.gathered_elems, owned[r]);
    out.exchanged_elems = std::max({out.exchanged_elems, sent[r], received[r]});
    out.adamw_elems = std::max(out.adamw_elems, shard_elems - held[r]);
    out.ns_flops = std::max(out.ns_flops, flops[r]);
  }
  return out;
}

MuonMemory muon_memory(const MuonPlan& plan, int64_t shard_group, int64_t grad_bytes) {
  MuonMemory out;
  std::vector<int64_t> owned(static_cast<size_t>(shard_group), 0), workspace = owned;
  for (size_t u = 0; u < plan.matrices.size(); ++u) {
    std::vector<int64_t> unit(static_cast<size_t>(shard_group), 0);
    for (size_t i = 0; i < plan.matrices[u].size(); ++i) {
      const MuonMatrix& m = plan.matrices[u][i];
      const size_t r = static_cast<size_t>(plan.owners[u].matrices[i].owner);
      unit[r] += m.elems();
      workspace[r] = std::max(workspace[r], muon_workspace_bytes(m.rows, m.cols));
    }
    for (size_t r = 0; r < unit.size(); ++r) {
      owned[r] += unit[r];
      if (shard_group > 1)
        out.gathered_bytes = std::max(out.gathered_bytes, (grad_bytes + 4) * unit[r]);
    }
  }
  for (size_t r = 0; r < owned.size(); ++r) {
    out.momentum_bytes = std::max(out.momentum_bytes, 4 * owned[r]);
    out.workspace_bytes = std::max(out.workspace_bytes, workspace[r]);
  }
  return out;
}

}  // namespace fsdpgen
