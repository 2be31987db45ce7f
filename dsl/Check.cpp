// Check: AST -> Spec. The sections are read with their tables of keys
// (dsl/Fields); the rules between keys (dsl/Rules) run after each
// section's fields and overrides are read; wrap units are resolved last.
#include "dsl/Check.h"

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "dsl/Fields.h"
#include "dsl/Layers.h"
#include "dsl/Rules.h"
#include "dsl/Values.h"
#include "suggest/Suggest.h"

namespace fsdpgen {
namespace {

class Checker {
 public:
  Checker(Diagnostics& d, const SpecOverrides& o)
      : ctx_(d),
        d_(d),
        v_(d),
        overrides_(o),
        s_(ctx_.spec),
        syntax_errors_(ctx_.after_syntax_errors) {}

  std::optional<Spec> run(const ast::File& file) {
    std::map<std::string, const ast::Section*> seen;
    for (const ast::Section& sec : file.sections) {
      auto [it, fresh] = seen.emplace(sec.kind, &sec);
      if (!fresh) {
        Diagnostic& e = d_.error(sec.kind_span, fmt::format("duplicate '{}' section", sec.kind));
        Diagnostics::note(e, it->second->kind_span, "previous definition is here");
      }
    }
    auto section = [&](const char* k) { return seen.count(k) ? seen[k] : nullptr; };
    const ast::Section* model = section("model");
    if (!model && !ctx_.after_syntax_errors) {
      Diagnostic& e = d_.error({0, 0}, "missing 'model' section");
      Diagnostics::note(e,
                        "a spec starts with e.g. 'model tiny { vocab = 256  context = 128  width = "
                        "128  heads = 4  layers = 4 }'");
    }
    bool model_ok = model && read_model(*model, ctx_);
    if (model_ok) {
      fill_model_defaults(ctx_);
      model_ok = check_rules(RuleSection::Model, ctx_) && !ctx_.keys.rejected_under("model.");
    }
    if (const ast::Section* p = section("parallel")) read_parallel(*p, ctx_);
    if (overrides_.world) override_world(ctx_, *overrides_.world);
    fill_parallel_defaults(ctx_);
    check_rules(RuleSection::Parallel, ctx_);
    if (const ast::Section* t = section("train")) read_train(*t, ctx_);
    if (overrides_.micro_batch) override_micro_batch(ctx_, *overrides_.micro_batch);
    check_rules(RuleSection::Train, ctx_);
    const ast::Section* units = section("units");
    if (model_ok) resolve_units(units);
    if (model_ok) check_shardable();
    if (d_.has_errors()) return std::nullopt;
    return s_;
  }

 private:
  bool has(const std::string& k) const { return ctx_.keys.has(k); }
  Span where(const std::string& k, Span fallback = {}) const {
    return ctx_.keys.where(k, fallback);
  }
  bool from_command_line(const std::string& k) const { return ctx_.keys.from_command_line(k); }
  bool usable(std::initializer_list<std::string_view> keys) const { return ctx_.keys.usable(keys); }

  // ---- units ----
  struct Claim {
    size_t unit;  // index into explicit list
    Span span;
  };

  std::string auto_name(const std::vector<LayerId>& layers) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < layers.size();) {
      if (layers[i].kind != LayerId::Kind::Block) {
        parts.push_back(std::string(to_string(layers[i])));
        ++i;
        continue;
      }
      size_t j = i;
      while (j + 1 < layers.size() && layers[j + 1].kind == LayerId::Kind::Block &&
             layers[j + 1].block == layers[j].block + 1)
        ++j;
      parts.push_back(i == j ? fmt::format("block{}", layers[i].block)
                             : fmt::format("blocks{}_{}", layers[i].block, layers[j].block));
      i = j + 1;
    }
    return fmt::format("{}", fmt::join(parts, "_"));
  }

  void resolve_units(const ast::Section* sec) {
    UnitsSpec& u = s_.units;
    const ModelSpec& m = s_.model;
    const int64_t L = m.layers;
    const int64_t n_layers = L + 3;
    std::vector<int> owner(n_layers, -1);  // forward order -> explicit unit index
    std::vector<Span> owner_span(n_layers);
    const ast::UnitItem* policy_item = nullptr;
    std::map<std::string, Span> names;
    bool ok = true;
    if (sec) {
      for (const ast::UnitItem& item : sec->units) {
        if (item.kind != ast::UnitItem::Kind::Explicit) {
          if (policy_item) {
            Diagnostic& e = d_.error(item.span,
                                     "conflicting wrap policies: give at most one of 'each block', "
                                     "'group N' and 'min_params N'");
            Diagnostics::note(e, policy_item->span, "previous policy is here");
            ok = false;
            continue;
          }
          policy_item = &item;
          if (item.kind == ast::UnitItem::Kind::Each) {
            u.policy = UnitPolicy::EachBlock;
          } else if (item.kind == ast::UnitItem::Kind::Group) {
            u.policy = UnitPolicy::Group;
            if (auto g = v_.as_int(item.count, "group", 1, kMaxLayers))
              u.group = *g;
            else
              ok = false;
          } else {
            u.policy = UnitPolicy::MinParams;
            if (auto g = v_.as_int(item.count, "min_params", 1, kMaxCount * 1000))
              u.min_params = *g;
            else
              ok = false;
          }
          continue;
        }
        ok &= explicit_unit(item, owner, owner_span, names);
      }
      if (!policy_item)
        u.policy = sec->units.empty() ? UnitPolicy::EachBlock : UnitPolicy::Explicit;
    }
    if (!ok) return;
    // Tied embedding and head must live in one unit: move both to the root.
    int emb = owner[0], head = owner[L + 2];
    if (m.tie_embeddings && emb != head) {
      // After a syntax error a unit may be missing, so the split may not be real.
      if (!syntax_errors_) {
        Span at = emb >= 0 ? owner_span[0] : owner_span[L + 2];
        Diagnostic& w =
            d_.warning(at, "tied token embedding and LM head are placed in different units");
        Diagnostics::note(w,
                          "moved both to the root unit, which stays gathered for the whole step");
      }
      for (int idx : {emb, head}) {
        if (idx < 0) continue;
        auto& ls = u.explicit_units[idx].layers;
        ls.erase(std::remove_if(ls.begin(), ls.end(),
                                [](const LayerId& l) {
                                  return l.kind == LayerId::Kind::Embed ||
                                         l.kind == LayerId::Kind::Head;
                                }),
                 ls.end());
      }
      owner[0] = owner[L + 2] = -1;
    }
    std::vector<UnitSpec> others;
    for (const UnitSpec& x : u.explicit_units)
      if (!x.layers.empty()) others.push_back(x);
    // The policy wraps runs of blocks that no explicit unit claims.
    std::vector<LayerId> run;
    int64_t run_params = 0;
    auto flush = [&] {
      if (!run.empty()) others.push_back({auto_name(run), run});
      run.clear();
      run_params = 0;
    };
    for (int64_t b = 0; b < L && u.policy != UnitPolicy::Explicit; ++b) {
      if (owner[1 + b] >= 0) {
        flush();
        continue;
      }
      LayerId id{LayerId::Kind::Block, b};
      run.push_back(id);
      run_params += layer_params(m, id);
      if (u.policy == UnitPolicy::EachBlock ||
          (u.policy == UnitPolicy::Group && (int64_t)run.size() == u.group) ||
          (u.policy == UnitPolicy::MinParams && run_params >= u.min_params))
        flush();
    }
    flush();
    std::vector<bool> claimed(n_layers, false);
    for (const UnitSpec& x : others)
      for (const LayerId& l : x.layers)
        claimed[l.order(L)] = true;
    UnitSpec root{"root", {}};
    for (const LayerId& l : all_layers(m))
      if (!claimed[l.order(L)]) root.layers.push_back(l);
    std::stable_sort(others.begin(), others.end(), [L](const UnitSpec& a, const UnitSpec& b) {
      return a.layers[0].order(L) < b.layers[0].order(L);
    });
    u.units.clear();
    u.units.push_back(root);
    for (UnitSpec& x : others) {
      if (names.count(x.name) == 0 &&
          std::any_of(u.units.begin(), u.units.end(),
                      [&](const UnitSpec& y) { return y.name == x.name; }))
        x.name += "_auto";
      u.units.push_back(x);
    }
  }

  bool explicit_unit(const ast::UnitItem& item, std::vector<int>& owner,
                     std::vector<Span>& owner_span, std::map<std::string, Span>& names) {
    UnitsSpec& u = s_.units;
    const int64_t L = s_.model.layers;
    const int index = static_cast<int>(u.explicit_units.size());
    std::vector<std::pair<LayerId, Span>> layers;
    bool ok = true;
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
          } else if (r.first < 0 || r.last >= L) {
            Diagnostic& e = d_.error(
                r.span, fmt::format("block {} is out of range", r.first < 0 ? r.first : r.last));
            Diagnostics::note(
                e, fmt::format("{} has {} block{}, numbered 0..{}",
                               s_.model.name.empty() ? "the model"
                                                     : fmt::format("model '{}'", s_.model.name),
                               L, L == 1 ? "" : "s", L - 1));
            ok = false;
          } else {
            for (int64_t b = r.first; b <= r.last; ++b)
              layers.push_back({{LayerId::Kind::Block, b}, r.span});
          }
          break;
      }
    }
    if (item.layers.empty()) {
      d_.error(item.span, "empty unit; list its layers, e.g. 'unit [block 0..3]'");
      ok = false;
    }
    std::vector<Span> reported;  // one error per layer reference, not per block of a range
    for (auto& [id, span] : layers) {
      int64_t o = id.order(L);
      if (owner[o] >= 0) {
        ok = false;
        if (std::find(reported.begin(), reported.end(), span) != reported.end()) continue;
        reported.push_back(span);
        std::string msg = owner[o] == index
                              ? fmt::format("{} is listed twice in this unit", to_string(id))
                              : fmt::format("{} is already in unit '{}'", to_string(id),
                                            u.explicit_units[owner[o]].name);
        Diagnostic& e = d_.error(span, msg);
        Diagnostics::note(e, owner_span[o], "first claimed here");
        continue;
      }
      owner[o] = index;
      owner_span[o] = span;
    }
    std::vector<LayerId> ids;
    for (auto& p : layers)
      ids.push_back(p.first);
    std::sort(ids.begin(), ids.end(),
              [L](const LayerId& a, const LayerId& b) { return a.order(L) < b.order(L); });
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (size_t i = 1; ok && i < ids.size(); ++i) {
      if (ids[i].order(L) == ids[i - 1].order(L) + 1) continue;
      Diagnostic& e = d_.error(
          item.span,
          fmt::format("the layers of a unit must be consecutive, but this unit skips from {} to {}",
                      to_string(ids[i - 1]), to_string(ids[i])));
      Diagnostics::note(
          e,
          fmt::format(
              "forward order is embed, block 0..{}, final_norm, head{}", L - 1,
              s_.model.tie_embeddings ? "; a tied embedding and head stay in the root unit" : ""));
      ok = false;
    }
    std::string name = item.name.empty() ? auto_name(ids) : item.name;
    if (!item.name.empty()) {
      if (item.name == "root") {
        Diagnostic& e = d_.error(item.name_span, "the unit name 'root' is reserved");
        Diagnostics::note(e, "the root unit holds the layers no other unit claims");
        ok = false;
      } else if (auto [it, fresh] = names.emplace(item.name, item.name_span); !fresh) {
        Diagnostic& e =
            d_.error(item.name_span, fmt::format("duplicate unit name '{}'", item.name));
        Diagnostics::note(e, it->second, "previous definition is here");
        ok = false;
      }
    }
    u.explicit_units.push_back({name, ids});
    return ok;
  }

  // Every rank of a shard group owns an equal, aligned slice of every unit; a
  // unit smaller than the group would leave ranks holding only padding.
  void check_shardable() {
    const ParallelSpec& p = s_.parallel;
    if (d_.has_errors() || p.shard_group <= 1) return;
    for (const UnitSpec& unit : s_.units.units) {
      int64_t n = 0;
      for (const LayerId& l : unit.layers)
        n += layer_params(s_.model, l);
      if (n == 0 || n >= p.shard_group) continue;
      Span at = where("parallel.shard_group", where("parallel.world"));
      Diagnostic& e = d_.error(
          at, fmt::format("cannot shard unit '{}' ({} parameters) over a shard group of {} ranks",
                          unit.name, grouped(n), grouped(p.shard_group)));
      Diagnostics::note(
          e, unit.name == "root"
                 ? "most ranks would own only padding; use fewer ranks, or hybrid sharding with a "
                   "smaller 'shard_group'"
                 : "most ranks would own only padding; use fewer ranks, hybrid sharding with a "
                   "smaller "
                   "'shard_group', or larger units (e.g. 'group 2' in units)");
      return;
    }
  }

  CheckContext ctx_;
  Diagnostics& d_;
  ValueReader v_;
  const SpecOverrides& overrides_;
  Spec& s_;
  bool& syntax_errors_;
};
}  // namespace

std::optional<Spec> check(const ast::File& file, Diagnostics& diags,
                          const SpecOverrides& overrides) {
  return Checker(diags, overrides).run(file);
}

}  // namespace fsdpgen
