// Units: resolves the 'units' section into every unit's layer list; see Units.h.
#include "dsl/Units.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "dsl/Values.h"

namespace fsdpgen {

std::vector<LayerRun> layer_runs(const std::vector<LayerId>& layers) {
  std::vector<LayerRun> runs;
  for (const LayerId& l : layers) {
    bool extends = !runs.empty() && l.kind == LayerId::Kind::Block &&
                   runs.back().first.kind == LayerId::Kind::Block &&
                   l.block == runs.back().last_block + 1;
    if (extends)
      runs.back().last_block = l.block;
    else
      runs.push_back({l, l.block});
  }
  return runs;
}

std::string auto_unit_name(const std::vector<LayerId>& layers) {
  std::vector<std::string> parts;
  for (const LayerRun& r : layer_runs(layers))
    if (r.first.kind != LayerId::Kind::Block)
      parts.push_back(to_string(r.first));
    else if (r.first.block == r.last_block)
      parts.push_back(fmt::format("block{}", r.first.block));
    else
      parts.push_back(fmt::format("blocks{}_{}", r.first.block, r.last_block));
  return fmt::format("{}", fmt::join(parts, "_"));
}

namespace {

class UnitResolver {
 public:
  explicit UnitResolver(CheckContext& ctx)
      : d_(ctx.diags),
        v_(ctx.diags),
        u_(ctx.spec.units),
        m_(ctx.spec.model),
        L_(ctx.spec.model.layers),
        syntax_errors_(ctx.after_syntax_errors),
        owner_(L_ + 3, -1),
        owner_span_(L_ + 3) {}

  void resolve(const ast::Section* sec) {
    if (sec && !read_items(*sec)) return;
    keep_tied_in_root();
    std::vector<UnitSpec> units;
    for (const UnitSpec& x : u_.explicit_units)
      if (!x.layers.empty()) units.push_back(x);
    wrap_unclaimed_blocks(units);
    assemble(std::move(units));
  }

 private:
  // Reads the policy and the explicit units; false when one was reported.
  bool read_items(const ast::Section& sec) {
    bool ok = true;
    for (const ast::UnitItem& item : sec.units)
      ok &= item.kind == ast::UnitItem::Kind::Explicit ? explicit_unit(item) : read_policy(item);
    if (!policy_item_) u_.policy = sec.units.empty() ? UnitPolicy::EachBlock : UnitPolicy::Explicit;
    return ok;
  }

  // each block | group N | min_params N, at most one of them.
  bool read_policy(const ast::UnitItem& item) {
    if (policy_item_) {
      Diagnostic& e = d_.error(item.span,
                               "conflicting wrap policies: give at most one of 'each block', "
                               "'group N' and 'min_params N'");
      Diagnostics::note(e, policy_item_->span, "previous policy is here");
      return false;
    }
    policy_item_ = &item;
    if (item.kind == ast::UnitItem::Kind::Each) {
      u_.policy = UnitPolicy::EachBlock;
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
    std::vector<LayerId> ids;
    for (auto& p : layers)
      ids.push_back(p.first);
    std::sort(ids.begin(), ids.end(),
              [this](const LayerId& a, const LayerId& b) { return a.order(L_) < b.order(L_); });
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ok) ok = consecutive(item, ids);
    if (!item.name.empty()) ok &= name_is_free(item);
    u_.explicit_units.push_back({item.name.empty() ? auto_unit_name(ids) : item.name, ids});
    return ok;
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
        case ast::LayerRef::Kind::Block:
          if (r.first > r.last) {
            d_.error(r.span,
                     fmt::format("empty block range {}..{}; ranges are inclusive and increasing",
                                 r.first, r.last));
            ok = false;
          } else if (r.first < 0 || r.last >= L_) {
            Diagnostic& e = d_.error(
                r.span, fmt::format("block {} is out of range", r.first < 0 ? r.first : r.last));
            Diagnostics::note(
                e, fmt::format("{} has {} block{}, numbered 0..{}",
                               m_.name.empty() ? "the model" : fmt::format("model '{}'", m_.name),
                               L_, L_ == 1 ? "" : "s", L_ - 1));
            ok = false;
          } else {
            for (int64_t b = r.first; b <= r.last; ++b)
              layers.push_back({{LayerId::Kind::Block, b}, r.span});
          }
          break;
      }
    }
    return layers;
  }

  // Records the unit being read as the owner of `layers`; a layer that
  // already has one is reported once per reference, not per block of a range.
  bool claim(const std::vector<std::pair<LayerId, Span>>& layers) {
    const int index = static_cast<int>(u_.explicit_units.size());
    bool ok = true;
    std::vector<Span> reported;
    for (const auto& [id, span] : layers) {
      int64_t o = id.order(L_);
      if (owner_[o] < 0) {
        owner_[o] = index;
        owner_span_[o] = span;
        continue;
      }
      ok = false;
      if (std::find(reported.begin(), reported.end(), span) != reported.end()) continue;
      reported.push_back(span);
      std::string msg = owner_[o] == index
                            ? fmt::format("{} is listed twice in this unit", to_string(id))
                            : fmt::format("{} is already in unit '{}'", to_string(id),
                                          u_.explicit_units[owner_[o]].name);
      Diagnostic& e = d_.error(span, msg);
      Diagnostics::note(e, owner_span_[o], "first claimed here");
    }
    return ok;
  }

  // `ids` (sorted, distinct) have no gap in forward order.
  bool consecutive(const ast::UnitItem& item, const std::vector<LayerId>& ids) {
    for (size_t i = 1; i < ids.size(); ++i) {
      if (ids[i].order(L_) == ids[i - 1].order(L_) + 1) continue;
      Diagnostic& e = d_.error(
          item.span,
          fmt::format("the layers of a unit must be consecutive, but this unit skips from {} to {}",
                      to_string(ids[i - 1]), to_string(ids[i])));
      Diagnostics::note(
          e, fmt::format(
                 "forward order is embed, block 0..{}, final_norm, head{}", L_ - 1,
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
    int emb = owner_[0], head = owner_[L_ + 2];
    if (!m_.tie_embeddings || emb == head) return;
    // After a syntax error a unit may be missing, so the split may not be real.
    if (!syntax_errors_) {
      Span at = emb >= 0 ? owner_span_[0] : owner_span_[L_ + 2];
      Diagnostic& w =
          d_.warning(at, "tied token embedding and LM head are placed in different units");
      Diagnostics::note(w, "moved both to the root unit, which stays gathered for the whole step");
    }
    for (int idx : {emb, head}) {
      if (idx < 0) continue;
      auto& ls = u_.explicit_units[idx].layers;
      ls.erase(std::remove_if(ls.begin(), ls.end(),
                              [](const LayerId& l) {
                                return l.kind == LayerId::Kind::Embed ||
                                       l.kind == LayerId::Kind::Head;
                              }),
               ls.end());
    }
    owner_[0] = owner_[L_ + 2] = -1;
  }

  // The policy wraps runs of blocks that no explicit unit claims.
  void wrap_unclaimed_blocks(std::vector<UnitSpec>& units) {
    std::vector<LayerId> run;
    int64_t run_params = 0;
    auto flush = [&] {
      if (!run.empty()) units.push_back({auto_unit_name(run), run});
      run.clear();
      run_params = 0;
    };
    for (int64_t b = 0; b < L_ && u_.policy != UnitPolicy::Explicit; ++b) {
      if (owner_[1 + b] >= 0) {
        flush();
        continue;
      }
      LayerId id{LayerId::Kind::Block, b};
      run.push_back(id);
      run_params += layer_params(m_, id);
      if (u_.policy == UnitPolicy::EachBlock ||
          (u_.policy == UnitPolicy::Group && (int64_t)run.size() == u_.group) ||
          (u_.policy == UnitPolicy::MinParams && run_params >= u_.min_params))
        flush();
    }
    flush();
  }

  // The root (every layer no unit claims) first, then the units in forward
  // order; an automatic name taken by another unit gets "_auto".
  void assemble(std::vector<UnitSpec> units) {
    std::vector<bool> claimed(L_ + 3, false);
    for (const UnitSpec& x : units)
      for (const LayerId& l : x.layers)
        claimed[l.order(L_)] = true;
    UnitSpec root{"root", {}};
    for (const LayerId& l : all_layers(m_))
      if (!claimed[l.order(L_)]) root.layers.push_back(l);
    std::stable_sort(units.begin(), units.end(), [this](const UnitSpec& a, const UnitSpec& b) {
      return a.layers[0].order(L_) < b.layers[0].order(L_);
    });
    u_.units.clear();
    u_.units.push_back(root);
    for (UnitSpec& x : units) {
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
  const bool syntax_errors_;
  std::vector<int> owner_;             // forward order -> explicit unit index, or -1
  std::vector<Span> owner_span_;       // forward order -> the reference that claimed it
  std::map<std::string, Span> names_;  // the names given to explicit units
  const ast::UnitItem* policy_item_ = nullptr;
};

}  // namespace

void resolve_units(const ast::Section* sec, CheckContext& ctx) {
  UnitResolver(ctx).resolve(sec);
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
