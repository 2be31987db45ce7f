// Lower: wrap units -> flat parameters, shards and segments.
#include "codegen/planner/Lower.h"

#include <map>
#include <set>

#include <fmt/format.h>

namespace fsdpgen {
namespace {

using model::round_up;

FlatUnit flatten(const Spec& spec, const UnitSpec& u, int index, int64_t shard_align_elems) {
  FlatUnit f;
  f.index = index;
  f.name = u.name;
  f.layers = u.layers;
  int64_t offset = 0;
  for (const LayerId& l : u.layers) {
    for (const TensorDecl& t : layer_tensors(spec.model, l)) {
      offset = round_up(offset, kTensorAlignElems);
      const int64_t stored = t.stored_elems(spec.model);
      f.tensors.push_back({t.name, t.shape, offset, t.elems(), stored});
      offset += stored;
      f.param_elems += t.elems();
      f.vocab_padding_elems += stored - t.elems();
    }
  }
  const int64_t S = spec.parallel.shard_group;
  f.shard_elems = offset == 0 ? 0 : round_up((offset + S - 1) / S, shard_align_elems);
  f.padded_elems = f.shard_elems * S;
  return f;
}

}  // namespace

Units lower(const Spec& spec) {
  Units out;
  out.spec = spec;
  out.shard_align_elems = std::max<int64_t>(
      1, spec.parallel.shard_align_bytes / dtype_bytes(spec.parallel.precision.param));
  const auto& units = spec.units.units;
  for (size_t i = 0; i < units.size(); ++i) {
    out.units.push_back(flatten(spec, units[i], static_cast<int>(i), out.shard_align_elems));
    out.total_params += out.units.back().param_elems;
    out.total_vocab_padding_elems += out.units.back().vocab_padding_elems;
    out.total_padded_elems += out.units.back().padded_elems;
  }
  // Segments: maximal runs of consecutive layers (forward order) owned by
  // one unit, a split block as its pieces.
  const int64_t L = spec.model.layers;
  std::map<int64_t, int> owner;  // LayerId::position -> unit
  std::set<int64_t> split;       // blocks held in pieces
  for (const FlatUnit& u : out.units)
    for (const LayerId& l : u.layers) {
      owner[l.position(L)] = u.index;
      if (l.kind == LayerId::Kind::Block && !l.whole()) split.insert(l.block);
    }
  std::vector<LayerId> layers;
  for (const LayerId& l : all_layers(spec.model))
    if (l.kind == LayerId::Kind::Block && split.count(l.block))
      for (const LayerId& p : block_pieces(spec.model, l.block))
        layers.push_back(p);
    else
      layers.push_back(l);
  for (const LayerId& l : layers) {
    int unit = owner.at(l.position(L));
    if (out.segments.empty() || out.segments.back().unit != unit) {
      Segment s{unit, {}, false, static_cast<int>(out.segments.size())};
      s.layers.push_back(l);
      if (continues_block(s)) s.group = out.segments.back().group;
      out.segments.push_back(s);
    } else {
      out.segments.back().layers.push_back(l);
    }
  }
  out.segments.back().has_loss = true;
  return out;
}

bool continues_block(const Segment& s) {
  const LayerId& l = s.layers.front();
  return l.kind == LayerId::Kind::Block && l.piece > 0;
}

std::vector<int> group_segments(const Units& u, int g) {
  std::vector<int> out;
  for (size_t i = 0; i < u.segments.size(); ++i)
    if (u.segments[i].group == g) out.push_back(static_cast<int>(i));
  return out;
}

bool shard_group_intra_node(const ParallelSpec& p) {
  return p.shard_group <= p.ranks_per_node && p.ranks_per_node % p.shard_group == 0;
}

bool replica_group_intra_node(const ParallelSpec& p) {
  // Members are shard_group ranks apart and span the whole world, so they
  // share a node only when the world fits on one.
  return p.replicas() <= 1 || p.world <= p.ranks_per_node;
}

std::string vocab_padding_note(const Units& u) {
  if (u.total_vocab_padding_elems == 0) return "";
  const ModelSpec& m = u.spec.model;
  return fmt::format(", {} of them vocab padding: vocab {} stored as {} rows, pad_vocab_to {}",
                     u.total_vocab_padding_elems, m.vocab, m.padded_vocab(), m.pad_vocab_to);
}

std::string print_units(const Units& u) {
  const ParallelSpec& p = u.spec.parallel;
  std::string out = fmt::format(
      "units of {}: {} parameters, {} padded elements ({} padding{}), shard group {} of world {}, "
      "shard alignment {} elements\n",
      u.spec.model.name, u.total_params, u.total_padded_elems, u.padding_elems(),
      vocab_padding_note(u), p.shard_group, p.world, u.shard_align_elems);
  for (const FlatUnit& f : u.units) {
    out += fmt::format("unit {} {}: {} params, flat {} elems, shard {} elems per rank\n", f.index,
                       f.name, f.param_elems, f.padded_elems, f.shard_elems);
    for (const FlatTensor& t : f.tensors)
      out += fmt::format(
          "  {:>12} {:>10}  {} ({}){}\n", t.offset_elems, t.elems, t.name, fmt::join(t.shape, ", "),
          t.stored_elems > t.elems
              ? fmt::format(" + {} zero vocab-padding elems", t.stored_elems - t.elems)
              : "");
  }
  out += "segments (forward order):";
  for (const Segment& s : u.segments) {
    out += fmt::format(" [u{}:", s.unit);
    for (const LayerId& l : s.layers)
      out += " " + layer_name(u.spec.model, l);
    out += s.has_loss ? " +loss]" : "]";
  }
  return out + "\n";
}

}  // namespace fsdpgen
