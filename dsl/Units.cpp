// Units: resolves the 'units' section into every unit's layer list; see Units.h.
#include "dsl/Units.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "dsl/Values.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {

std::vector<LayerRun> layer_runs(const std::vector<LayerId>& layers) {
  std::vector<LayerRun> runs;
  for (const LayerId& l : layers) {
    bool extends = !runs.empty() && l.kind == LayerId::Kind::Block && l.whole() &&
                   runs.back().first.kind == LayerId::Kind::Block && runs.back().first.whole() &&
                   l.block == runs.back().last_block + 1;
    if (extends)
      runs.back().last_block = l.block;
    else
      runs.push_back({l, l.block});
  }
  return runs;
}

std::string auto_unit_name(const ModelSpec& m, const std::vector<LayerId>& layers) {
  std::vector<std::string> parts;
  for (const LayerRun& r : layer_runs(layers))
    if (r.first.kind != LayerId::Kind::Block)
      parts.push_back(to_string(r.first));
    else if (!r.first.whole()) {
      std::string piece = block_piece(m, r.first.piece).name;
      std::replace(piece.begin(), piece.end(), '.', '_');
      if (parts.empty() || parts.back().rfind(fmt::format("block{}_", r.first.block), 0) != 0)
        parts.push_back(fmt::format("block{}_{}", r.first.block, piece));
      else
        parts.back() += "_" + piece;
    } else if (r.first.block == r.last_block)
      parts.push_back(fmt::format("block{}", r.first.block));
    else
      parts.push_back(fmt::format("blocks{}_{}", r.first.block, r.last_block));
  return fmt::format("{}", fmt::join(parts, "_"));
}

namespace {

// The resolver owns layers piece by piece: a block is P slots (its family's
// pieces, runtime/model/layout.h), the embedding, final norm and head one each.
// Slot index: embed 0, block b piece p 1 + b * P + p, final_norm 1 + L * P,
// head 2 + L * P. A unit that owns all of a block's slots holds the block
// whole; one that owns some holds those pieces.
class UnitResolver {
 public:
  explicit UnitResolver(CheckContext& ctx)
      : d_(ctx.diags),
        v_(ctx.diags),
        u_(ctx.spec.units),
        m_(ctx.spec.model),
        L_(ctx.spec.model.layers),
        P_(block_piece_count(ctx.spec.model)),
        syntax_errors_(ctx.after_syntax_errors),
        owner_(slots(), -1),
        owner_span_(slots()),
        owner_whole_(slots(), false) {}

  void resolve(const ast::Section* sec) {
    if (sec && !read_items(*sec)) return;
    keep_tied_in_root();
    std::vector<std::vector<int64_t>> units;  // slots, per unit
    for (size_t i = 0; i < u_.explicit_units.size(); ++i) {
      std::vector<int64_t> mine;
      for (int64_t k = 0; k < slots(); ++k)
        if (owner_[k] == static_cast<int>(i)) mine.push_back(k);
      u_.explicit_units[i].layers = layers_of(mine);
      if (!mine.empty()) units.push_back(mine);
    }
    wrap_unclaimed(units);
    assemble(units);
  }

 private:
  int64_t slots() const { return 3 + L_ * P_; }
  int64_t slot_of(const LayerId& l) const {
    switch (l.kind) {
      case LayerId::Kind::Embed:
        return 0;
      case LayerId::Kind::Block:
        return 1 + l.block * P_ + std::max(l.piece, 0);
      case LayerId::Kind::FinalNorm:
        return 1 + L_ * P_;
      case LayerId::Kind::Head:
        return 2 + L_ * P_;
    }
    return 0;
  }
  LayerId slot_layer(int64_t k) const {
    if (k == 0) return {LayerId::Kind::Embed, 0};
    if (k == 1 + L_ * P_) return {LayerId::Kind::FinalNorm, 0};
    if (k == 2 + L_ * P_) return {LayerId::Kind::Head, 0};
    return {LayerId::Kind::Block, (k - 1) / P_, static_cast<int>((k - 1) % P_)};
  }
  // The slots a layer covers: a whole block's P, else one.
  std::vector<int64_t> slots_of(const LayerId& l) const {
    std::vector<int64_t> out{slot_of(l)};
    if (l.kind == LayerId::Kind::Block && l.whole())
      for (int p = 1; p < P_; ++p)
        out.push_back(out.front() + p);
    return out;
  }
  // Sorted slots -> layers: whole blocks where all of a block's slots are there.
  std::vector<LayerId> layers_of(const std::vector<int64_t>& sorted) const {
    std::vector<LayerId> out;
    for (size_t i = 0; i < sorted.size();) {
      const LayerId l = slot_layer(sorted[i]);
      const bool whole = l.kind == LayerId::Kind::Block && l.piece == 0 &&
                         i + P_ <= sorted.size() && sorted[i + P_ - 1] == sorted[i] + P_ - 1;
      if (whole) {
        out.push_back({LayerId::Kind::Block, l.block});
        i += P_;
      } else {
        out.push_back(l);
        ++i;
      }
    }
    return out;
  }

  // Reads the policy and the explicit units; false when one was reported.
  bool read_items(const ast::Section& sec) {
    bool ok = true;
    for (const ast::UnitItem& item : sec.units)
      ok &= item.kind == ast::UnitItem::Kind::Explicit ? explicit_unit(item) : read_policy(item);
    if (!policy_item_) u_.policy = sec.units.empty() ? UnitPolicy::EachBlock : UnitPolicy::Explicit;
    return ok;
  }

  // each block | each linear | group N | min_params N, at most one of them.
  bool read_policy(const ast::UnitItem& item) {
    if (policy_item_) {
      Diagnostic& e = d_.error(item.span,
                               "conflicting wrap policies: give at most one of 'each block', "
                               "'each linear', 'group N' and 'min_params N'");
      Diagnostics::note(e, policy_item_->span, "previous policy is here");
      return false;
    }
    policy_item_ = &item;
    if (item.kind == ast::UnitItem::Kind::Each) {
      u_.policy = UnitPolicy::EachBlock;
      return true;
    }
    if (item.kind == ast::UnitItem::Kind::EachLinear) {
      u_.policy = UnitPolicy::EachLinear;
      return true;
    }
    if (item.kind == ast::UnitItem::Kind::Group) {
      u_.policy = UnitPolicy::Group;
      auto g = v_.as_int(item.count, "group", 1, kMaxLayers);
      if (g) u_.group = *g;
      return g.has_value();
    }
    u_.policy = UnitPolicy::MinParams;
    auto n = v_.as_int(item.count, "min_params", 1, kMaxCount * 1000);
    if (n) u_.min_params = *n;
    return n.has_value();
  }

  // unit NAME [layers]: claims its layers for explicit unit number
  // u_.explicit_units.size().
  bool explicit_unit(const ast::UnitItem& item) {
    bool ok = true;
    std::vector<std::pair<LayerId, Span>> layers = referenced_layers(item, ok);
    if (item.layers.empty()) {
      d_.error(item.span, "empty unit; list its layers, e.g. 'unit [block 0..3]'");
      ok = false;
    }
    ok &= claim(layers);
    std::vector<int64_t> mine;
    for (auto& [l, span] : layers)
      for (int64_t k : slots_of(l))
        mine.push_back(k);
    std::sort(mine.begin(), mine.end());
    mine.erase(std::unique(mine.begin(), mine.end()), mine.end());
    if (ok) ok = consecutive(item, mine);
    std::vector<LayerId> ids = layers_of(mine);
    if (!item.name.empty()) ok &= name_is_free(item);
    u_.explicit_units.push_back({item.name.empty() ? auto_unit_name(m_, ids) : item.name, ids});
    return ok;
  }

  // The pieces `r.piece` names in each block, or none (reported).
  std::vector<int> referenced_pieces(const ast::LayerRef& r, bool& ok) {
    std::vector<int> pieces = pieces_named(m_, r.piece);
    if (!pieces.empty()) return pieces;
    ok = false;
    std::vector<std::string> names;
    for (int i = 0; i < P_; ++i) {
      const std::string n = block_piece(m_, i).name;
      if (r.piece.size() > n.size() && r.piece.compare(0, n.size(), n) == 0 &&
          r.piece[n.size()] == '.') {
        Diagnostic& e = d_.error(
            r.piece_span,
            fmt::format("'{}' is a tensor of {}; a unit holds a module whole, its weight with "
                        "its bias: did you mean '{}'?",
                        r.piece, n, n));
        Diagnostics::note(e, "name a module of the block, e.g. 'block 3.attn.c_attn'");
        return {};
      }
      names.push_back(n);
      if (const size_t dot = n.find('.'); dot != std::string::npos)
        names.push_back(n.substr(0, dot));
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    std::vector<std::string_view> views(names.begin(), names.end());
    Diagnostic& e = d_.error(
        r.piece_span, fmt::format("a {} block has no module '{}'", to_string(m_.family), r.piece));
    if (std::string m = closest_match(r.piece, views); !m.empty())
      e.message += fmt::format("; did you mean '{}'?", m);
    else
      Diagnostics::note(e, "its modules are " + quoted_choices(views, " and "));
    return {};
  }

  // The layers an item lists, each with the reference that names it.
  std::vector<std::pair<LayerId, Span>> referenced_layers(const ast::UnitItem& item, bool& ok) {
    std::vector<std::pair<LayerId, Span>> layers;
    for (const ast::LayerRef& r : item.layers) {
      switch (r.kind) {
        case ast::LayerRef::Kind::Embed:
          layers.push_back({{LayerId::Kind::Embed, 0}, r.span});
          break;
        case ast::LayerRef::Kind::FinalNorm:
          layers.push_back({{LayerId::Kind::FinalNorm, 0}, r.span});
          break;
        case ast::LayerRef::Kind::Head:
          layers.push_back({{LayerId::Kind::Head, 0}, r.span});
          break;
        case ast::LayerRef::Kind::Block: {
          if (r.first > r.last) {
            d_.error(r.span,
                     fmt::format("empty block range {}..{}; ranges are inclusive and increasing",
                                 r.first, r.last));
            ok = false;
            break;
          }
          if (r.first < 0 || r.last >= L_) {
            Diagnostic& e = d_.error(
                r.span, fmt::format("block {} is out of range", r.first < 0 ? r.first : r.last));
            Diagnostics::note(
                e, fmt::format("{} has {} block{}, numbered 0..{}",
                               m_.name.empty() ? "the model" : fmt::format("model '{}'", m_.name),
                               L_, L_ == 1 ? "" : "s", L_ - 1));
            ok = false;
            break;
          }
          std::vector<int> pieces{-1};
          if (!r.piece.empty()) pieces = referenced_pieces(r, ok);
          for (int64_t b = r.first; b <= r.last; ++b)
            for (int p : pieces)
              layers.push_back({{LayerId::Kind::Block, b, p}, r.span});
          break;
        }
      }
    }
    return layers;
  }

  // Records the unit being read as the owner of `layers`' slots; a slot that
  // already has one is reported once per reference, not per block of a range.
  bool claim(const std::vector<std::pair<LayerId, Span>>& layers) {
    const int index = static_cast<int>(u_.explicit_units.size());
    bool ok = true;
    std::vector<Span> reported;
    for (const auto& [id, span] : layers) {
      for (int64_t k : slots_of(id)) {
        if (owner_[k] < 0) {
          owner_[k] = index;
          owner_span_[k] = span;
          owner_whole_[k] = id.kind == LayerId::Kind::Block && id.whole();
          continue;
        }
        ok = false;
        if (std::find(reported.begin(), reported.end(), span) != reported.end()) continue;
        reported.push_back(span);
        const bool both_whole = owner_whole_[k] && id.whole();
        const std::string what = both_whole ? to_string(id) : layer_name(m_, slot_layer(k));
        std::string msg = owner_[k] == index ? fmt::format("{} is listed twice in this unit", what)
                                             : fmt::format("{} is already in unit '{}'", what,
                                                           u_.explicit_units[owner_[k]].name);
        Diagnostic& e = d_.error(span, msg);
        Diagnostics::note(e, owner_span_[k], "first claimed here");
      }
    }
    return ok;
  }

  // `sorted` (distinct slots) has no gap in forward order.
  bool consecutive(const ast::UnitItem& item, const std::vector<int64_t>& sorted) {
    const std::vector<LayerId> ls = layers_of(sorted);
    for (size_t i = 1; i < ls.size(); ++i) {
      if (slot_of(ls[i]) == slots_of(ls[i - 1]).back() + 1) continue;
      Diagnostic& e = d_.error(
          item.span,
          fmt::format("the layers of a unit must be consecutive, but this unit skips from {} to {}",
                      layer_name(m_, ls[i - 1]), layer_name(m_, ls[i])));
      Diagnostics::note(
          e, fmt::format(
                 "forward order is embed, block 0..{} (each block's modules in order), "
                 "final_norm, head{}",
                 L_ - 1,
                 m_.tie_embeddings ? "; a tied embedding and head stay in the root unit" : ""));
      return false;
    }
    return true;
  }

  bool name_is_free(const ast::UnitItem& item) {
    if (item.name == "root") {
      Diagnostic& e = d_.error(item.name_span, "the unit name 'root' is reserved");
      Diagnostics::note(e, "the root unit holds the layers no other unit claims");
      return false;
    }
    if (auto [it, fresh] = names_.emplace(item.name, item.name_span); !fresh) {
      Diagnostic& e = d_.error(item.name_span, fmt::format("duplicate unit name '{}'", item.name));
      Diagnostics::note(e, it->second, "previous definition is here");
      return false;
    }
    return true;
  }

  // A tied embedding and head must live in one unit: both move to the root.
  void keep_tied_in_root() {
    const int64_t head_slot = 2 + L_ * P_;
    int emb = owner_[0], head = owner_[head_slot];
    if (!m_.tie_embeddings || emb == head) return;
    // After a syntax error a unit may be missing, so the split may not be real.
    if (!syntax_errors_) {
      Span at = emb >= 0 ? owner_span_[0] : owner_span_[head_slot];
      Diagnostic& w =
          d_.warning(at, "tied token embedding and LM head are placed in different units");
      Diagnostics::note(w, "moved both to the root unit, which stays gathered for the whole step");
    }
    owner_[0] = owner_[head_slot] = -1;
  }

  // The policy wraps the blocks no explicit unit claims; the pieces an
  // explicit unit leaves of a block it splits are wrapped too, each run of
  // them as a unit (each linear: as that policy cuts them), never the root.
  void wrap_unclaimed(std::vector<std::vector<int64_t>>& units) {
    std::vector<int64_t> run;
    int64_t run_params = 0;
    auto flush = [&] {
      if (!run.empty()) units.push_back(run);
      run.clear();
      run_params = 0;
    };
    for (int64_t b = 0; b < L_; ++b) {
      const int64_t first = 1 + b * P_;
      int claimed = 0;
      for (int p = 0; p < P_; ++p)
        claimed += owner_[first + p] >= 0;
      if (claimed == P_) {
        flush();
        continue;
      }
      if (claimed > 0 || u_.policy == UnitPolicy::EachLinear) {
        flush();
        wrap_pieces(first, units);
        continue;
      }
      if (u_.policy == UnitPolicy::Explicit) continue;
      for (int p = 0; p < P_; ++p)
        run.push_back(first + p);
      run_params += layer_params(m_, {LayerId::Kind::Block, b});
      if (u_.policy == UnitPolicy::EachBlock ||
          (u_.policy == UnitPolicy::Group && static_cast<int64_t>(run.size()) == u_.group * P_) ||
          (u_.policy == UnitPolicy::MinParams && run_params >= u_.min_params))
        flush();
    }
    flush();
  }

  // The unclaimed pieces of the block whose slots start at `first`: a unit
  // per run; under each linear, a unit per linear module, a norm joining the
  // linear after it (or, where an explicit unit holds that, the one before).
  void wrap_pieces(int64_t first, std::vector<std::vector<int64_t>>& units) const {
    std::vector<int64_t> run;
    bool has_linear = false;
    const size_t block_start = units.size();
    auto flush = [&] {
      // A norm with no linear after it (an explicit unit claims that) joins
      // the unit just before it, when that one is of this block and adjacent.
      if (!run.empty() && !has_linear && units.size() > block_start &&
          units.back().back() + 1 == run.front())
        units.back().insert(units.back().end(), run.begin(), run.end());
      else if (!run.empty())
        units.push_back(run);
      run.clear();
      has_linear = false;
    };
    for (int p = 0; p < P_; ++p) {
      if (owner_[first + p] >= 0) {
        flush();
        continue;
      }
      if (u_.policy == UnitPolicy::EachLinear && (has_linear || !block_piece(m_, p).linear))
        flush();
      run.push_back(first + p);
      has_linear |= block_piece(m_, p).linear;
    }
    flush();
  }

  // The root (every layer no unit claims) first, then the units in forward
  // order; an automatic name taken by another unit gets "_auto".
  void assemble(const std::vector<std::vector<int64_t>>& units) {
    std::vector<bool> claimed(slots(), false);
    for (const auto& x : units)
      for (int64_t k : x)
        claimed[k] = true;
    std::vector<int64_t> root;
    for (int64_t k = 0; k < slots(); ++k)
      if (!claimed[k]) root.push_back(k);
    std::vector<std::pair<int64_t, UnitSpec>> sorted;
    for (const auto& x : units) {
      int explicit_index = owner_[x.front()];
      std::vector<LayerId> ids = layers_of(x);
      if (explicit_index >= 0)
        sorted.push_back({x.front(), u_.explicit_units[explicit_index]});
      else
        sorted.push_back({x.front(), {auto_unit_name(m_, ids), ids}});
    }
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    u_.units.clear();
    u_.units.push_back({"root", layers_of(root)});
    for (auto& entry : sorted) {
      UnitSpec& x = entry.second;
      if (names_.count(x.name) == 0 &&
          std::any_of(u_.units.begin(), u_.units.end(),
                      [&](const UnitSpec& y) { return y.name == x.name; }))
        x.name += "_auto";
      u_.units.push_back(x);
    }
  }

  Diagnostics& d_;
  ValueReader v_;
  UnitsSpec& u_;
  const ModelSpec& m_;
  const int64_t L_;
  const int P_;
  const bool syntax_errors_;
  std::vector<int> owner_;             // slot -> explicit unit index, or -1
  std::vector<Span> owner_span_;       // slot -> the reference that claimed it
  std::vector<bool> owner_whole_;      // slot -> claimed as part of a whole block
  std::map<std::string, Span> names_;  // the names given to explicit units
  const ast::UnitItem* policy_item_ = nullptr;
};

}  // namespace

void resolve_units(const ast::Section* sec, CheckContext& ctx) {
  UnitResolver(ctx).resolve(sec);
}

namespace {

// The units a units section of this one item (none: an empty section) gives m.
UnitsSpec units_of(const ModelSpec& m, const ast::UnitItem* item) {
  const SourceFile none("policy", "");
  Diagnostics diags(none);
  CheckContext ctx(diags);
  ctx.spec.model = m;
  ast::Section sec;
  if (item) sec.units.push_back(*item);
  resolve_units(&sec, ctx);
  return ctx.spec.units;
}

}  // namespace

UnitsSpec policy_units(const ModelSpec& m, UnitPolicy policy) {
  ast::UnitItem item;
  item.kind = policy == UnitPolicy::EachLinear ? ast::UnitItem::Kind::EachLinear
                                               : ast::UnitItem::Kind::Each;
  return units_of(m, policy != UnitPolicy::Explicit ? &item : nullptr);
}

UnitsSpec group_units(const ModelSpec& m, int64_t k) {
  ast::UnitItem item;
  item.kind = ast::UnitItem::Kind::Group;
  item.count.kind = ast::Value::Kind::Number;
  item.count.is_integer = true;
  item.count.integer = k;
  item.count.number = static_cast<double>(k);
  item.count.text = std::to_string(k);
  return units_of(m, &item);
}

void check_shardable(CheckContext& ctx) {
  const ParallelSpec& p = ctx.spec.parallel;
  if (ctx.diags.has_errors() || p.shard_group <= 1) return;
  for (const UnitSpec& unit : ctx.spec.units.units) {
    int64_t n = 0;
    for (const LayerId& l : unit.layers)
      n += layer_params(ctx.spec.model, l);
    if (n == 0 || n >= p.shard_group) continue;
    Span at = ctx.keys.where("parallel.shard_group", ctx.keys.where("parallel.world"));
    Diagnostic& e = ctx.diags.error(
        at, fmt::format("cannot shard unit '{}' ({} parameters) over a shard group of {} ranks",
                        unit.name, grouped(n), grouped(p.shard_group)));
    Diagnostics::note(
        e, unit.name == "root"
               ? "most ranks would own only padding; use fewer ranks, or hybrid sharding with a "
                 "smaller 'shard_group'"
               : "most ranks would own only padding; use fewer ranks, hybrid sharding with a "
                 "smaller 'shard_group', or larger units (e.g. 'group 2' in units)");
    return;
  }
}

}  // namespace fsdpgen
