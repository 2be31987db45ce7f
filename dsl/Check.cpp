// Check: AST -> Spec. One Checker walks the sections with a table of keys per
// section; value readers report type and range errors; cross-field rules run
// after all fields are read; wrap units are resolved last.
#include "dsl/Check.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "dsl/Values.h"
#include "suggest/Suggest.h"

namespace fsdpgen {
namespace {

// Bounds that keep every size computation far from int64 overflow.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPadVocabTo = 4096;  // more only wastes memory
constexpr int64_t kMaxContext = int64_t{1} << 22;
constexpr int64_t kMaxWidth = int64_t{1} << 17;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxFfn = int64_t{1} << 20;
constexpr int64_t kMaxWorld = int64_t{1} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 40;

class Checker {
 public:
  Checker(Diagnostics& d, const SpecOverrides& o) : d_(d), v_(d), overrides_(o) {}

  std::optional<Spec> run(const ast::File& file) {
    // After a syntax error some entries are missing from the AST; do not
    // report them as missing a second time.
    syntax_errors_ = d_.has_errors();
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
    if (!model && !syntax_errors_) {
      Diagnostic& e = d_.error({0, 0}, "missing 'model' section");
      Diagnostics::note(e,
                        "a spec starts with e.g. 'model tiny { vocab = 256  context = 128  width = "
                        "128  heads = 4  layers = 4 }'");
    }
    bool model_ok = model && read_model(*model);
    if (const ast::Section* p = section("parallel")) read_parallel(*p);
    if (overrides_.world)
      override_int("world", *overrides_.world, 1, kMaxWorld, s_.parallel.world, "parallel.world");
    resolve_parallel();
    if (const ast::Section* t = section("train")) read_train(*t);
    if (overrides_.micro_batch)
      override_int("micro-batch", *overrides_.micro_batch, 1, 1 << 20, s_.train.micro_batch,
                   "train.micro_batch");
    check_train();
    const ast::Section* units = section("units");
    if (model_ok) resolve_units(units);
    if (model_ok) check_shardable();
    if (d_.has_errors()) return std::nullopt;
    return s_;
  }

 private:
  // ---- where things were written, for diagnostics that span fields ----
  bool has(const std::string& k) const { return at_.count(k) > 0; }
  Span where(const std::string& k, Span fallback = {}) const {
    auto it = at_.find(k);
    return it == at_.end() ? fallback : it->second;
  }

  bool from_command_line(const std::string& k) const { return where(k).command_line != 0; }

  // A value given on the command line (--world, --micro-batch) replaces the
  // spec's; errors about it are the flag's, with a note where the spec sets
  // the value it replaced.
  void override_int(const char* flag, int64_t v, int64_t lo, int64_t hi, int64_t& out,
                    const std::string& key) {
    const std::string given = fmt::format("--{} {}", flag, v);
    if (v < lo || v > hi) {
      d_.error(d_.command_line(given), fmt::format("must be between {} and {}", lo, grouped(hi)));
      return;
    }
    out = v;
    std::optional<DiagNote> replaced;
    if (auto it = entry_at_.find(key); it != entry_at_.end())
      replaced = DiagNote{true, it->second,
                          fmt::format("the spec says {} = {} here", key.substr(key.rfind('.') + 1),
                                      d_.file().slice(where(key)))};
    at_[key] = d_.command_line(given, replaced);
  }

  // ---- entries ----
  struct Field {
    std::string_view key;
    std::function<void(const ast::Entry&)> read;
  };

  // Reads entries against a table of fields; reports duplicates and unknown keys.
  void read_fields(const std::vector<ast::Entry>& entries, const std::vector<Field>& fields,
                   const std::string& ctx, const std::string& prefix) {
    std::map<std::string, const ast::Entry*> seen;
    std::vector<std::string_view> keys;
    for (const Field& f : fields)
      keys.push_back(f.key);
    for (const ast::Entry& e : entries) {
      if (e.kind == ast::Entry::Kind::Error) {
        // Already reported by the parser: the key is given, its value unknown.
        at_[prefix + e.key] = e.key_span;
        bad_.insert(prefix + e.key);
        continue;
      }
      auto [it, fresh] = seen.emplace(e.key, &e);
      if (!fresh) {
        Diagnostic& d = d_.error(e.key_span, fmt::format("duplicate key '{}' in {}", e.key, ctx));
        Diagnostics::note(d, it->second->key_span, "previous definition is here");
        continue;
      }
      auto f = std::find_if(fields.begin(), fields.end(),
                            [&](const Field& x) { return x.key == e.key; });
      if (f == fields.end()) {
        Diagnostic& d = d_.error(e.key_span, fmt::format("unknown key '{}' in {}", e.key, ctx));
        std::string m = closest_match(e.key, keys);
        if (!m.empty())
          d.message += fmt::format("; did you mean '{}'?", m);
        else
          Diagnostics::note(d, fmt::format("valid keys are {}", quoted_choices(keys, " and ")));
        continue;
      }
      at_[prefix + e.key] = e.kind == ast::Entry::Kind::Assign ? e.value.span : e.span;
      entry_at_[prefix + e.key] = e.span;
      size_t errors_before = d_.error_count();
      f->read(e);
      if (d_.error_count() != errors_before) bad_.insert(prefix + e.key);
    }
  }

  // True when none of `keys` was given a value that was rejected: rules that
  // relate several keys skip themselves rather than report against a default.
  bool usable(std::initializer_list<std::string_view> keys) const {
    return std::none_of(keys.begin(), keys.end(),
                        [&](std::string_view k) { return bad_.count(std::string(k)) > 0; });
  }

  // The value of `key = value`; a block given instead is an error.
  const ast::Value* value_of(const ast::Entry& e) {
    if (e.kind == ast::Entry::Kind::Block) {
      d_.error(e.key_span,
               fmt::format("'{}' takes a value, not a block; write '{} = ...'", e.key, e.key));
      return nullptr;
    }
    if (e.kind == ast::Entry::Kind::Call) {
      d_.error(e.key_span,
               fmt::format("'{}' takes a value, not arguments; write '{} = ...'", e.key, e.key));
      return nullptr;
    }
    return &e.value;
  }

  // The entries of `key { ... }`; anything else is an error.
  const std::vector<ast::Entry>* block_of(const ast::Entry& e, std::string_view example) {
    if (e.kind != ast::Entry::Kind::Block) {
      Diagnostic& d = d_.error(e.span, fmt::format("'{}' is a block, not a value", e.key));
      Diagnostics::note(d, fmt::format("write '{} {{ {} }}'", e.key, example));
      return nullptr;
    }
    return &e.entries;
  }

  template <class T, class F>
  Field field(std::string_view key, T& out, F reader) {
    return {key, [this, &out, reader](const ast::Entry& e) {
              if (const ast::Value* v = value_of(e))
                if (auto r = reader(*v, e.key)) out = *r;
            }};
  }
  Field int_field(std::string_view key, int64_t& out, int64_t lo, int64_t hi) {
    return field(key, out, [this, lo, hi](const ast::Value& v, const std::string& k) {
      return v_.as_int(v, k, lo, hi);
    });
  }
  Field bool_field(std::string_view key, bool& out) {
    return field(key, out,
                 [this](const ast::Value& v, const std::string& k) { return v_.as_bool(v, k); });
  }
  template <class E, size_t N>
  Field enum_field(std::string_view key, E& out, std::string_view what,
                   const std::array<std::string_view, N>& names) {
    return field(key, out, [this, what, &names](const ast::Value& v, const std::string&) {
      return v_.as_enum<E>(v, what, names);
    });
  }
  Field dtype_field(std::string_view key, DType& out) {
    return field(key, out,
                 [this](const ast::Value& v, const std::string&) { return v_.as_dtype(v); });
  }

  // ---- model ----
  bool read_model(const ast::Section& sec) {
    ModelSpec& m = s_.model;
    m.name = sec.name;
    int64_t kv_heads = 0, ffn = 0;
    double rope = 0;
    bool tie = true;
    std::vector<Field> fields = {
        enum_field("family", m.family, "model family", kFamilyNames),
        int_field("vocab", m.vocab, 1, kMaxVocab),
        int_field("context", m.context, 1, kMaxContext),
        int_field("width", m.width, 1, kMaxWidth),
        int_field("heads", m.heads, 1, kMaxWidth),
        int_field("kv_heads", kv_heads, 1, kMaxWidth),
        int_field("layers", m.layers, 1, kMaxLayers),
        int_field("ffn_hidden", ffn, 1, kMaxFfn),
        bool_field("tie_embeddings", tie),
        int_field("pad_vocab_to", m.pad_vocab_to, 1, kMaxPadVocabTo),
        field("norm_eps", m.norm_eps,
              [this](const ast::Value& v, const std::string& k) {
                return v_.as_float(v, k, 0, 0.5, false);
              }),
        field("rope_theta", rope,
              [this](const ast::Value& v, const std::string& k) {
                return v_.as_float(v, k, 0, 1e12, false);
              }),
    };
    std::string ctx = m.name.empty() ? "section 'model'" : fmt::format("model '{}'", m.name);
    read_fields(sec.entries, fields, ctx, "model.");
    std::vector<std::string_view> missing;
    for (std::string_view k : {"vocab", "context", "width", "heads", "layers"})
      if (!has(fmt::format("model.{}", k))) missing.push_back(k);
    if (!missing.empty()) {
      if (!syntax_errors_) {
        Diagnostic& e =
            d_.error(sec.name.empty() ? sec.kind_span : sec.name_span,
                     fmt::format("{} is missing {}", ctx, quoted_choices(missing, " and ")));
        Diagnostics::note(e, "a model must set 'vocab', 'context', 'width', 'heads' and 'layers'");
      }
      return false;
    }
    // Rules between keys run only on values that were read; a rejected one
    // was reported already and keeps a default that would mislead them.
    bool ok = std::none_of(bad_.begin(), bad_.end(),
                           [](const std::string& k) { return k.starts_with("model."); });
    bool llama = m.family == Family::Llama;
    bool family_known = usable({"model.family"});
    m.tie_embeddings = has("model.tie_embeddings") ? tie : !llama;
    if (usable({"model.width", "model.heads"}) && m.width % m.heads != 0) {
      Diagnostic& e = d_.error(where("model.heads"),
                               fmt::format("heads ({}) must divide width ({})", m.heads, m.width));
      Diagnostics::note(e, fmt::format("width / heads = {} / {} leaves a remainder of {}", m.width,
                                       m.heads, m.width % m.heads));
      ok = false;
    }
    m.kv_heads = has("model.kv_heads") ? kv_heads : m.heads;
    bool kv_known = family_known && usable({"model.heads", "model.kv_heads"});
    if (kv_known && has("model.kv_heads") && !llama && kv_heads != m.heads) {
      Diagnostic& e = d_.error(where("model.kv_heads"),
                               "kv_heads (grouped-query attention) applies only to family llama");
      if (has("model.family"))
        Diagnostics::note(e, where("model.family"),
                          "family is 'gpt2' here; gpt2 uses kv_heads = heads");
      else
        Diagnostics::note(e, "family is 'gpt2' by default; gpt2 uses kv_heads = heads");
      ok = false;
    } else if (kv_known && m.heads % m.kv_heads != 0) {
      d_.error(where("model.kv_heads"),
               fmt::format("kv_heads ({}) must divide heads ({})", m.kv_heads, m.heads));
      ok = false;
    }
    if (family_known && has("model.rope_theta") && !llama) {
      Diagnostic& e =
          d_.error(where("model.rope_theta"), "rope_theta applies only to family llama");
      Diagnostics::note(e,
                        has("model.family")
                            ? "gpt2 uses learned position embeddings"
                            : "family is 'gpt2' by default; gpt2 uses learned position embeddings");
      ok = false;
    }
    if (llama)
      m.rope_theta = has("model.rope_theta") ? rope : 10000.0;
    else
      m.rope_theta = 10000.0;
    // llama: SwiGLU hidden = 2/3 of 4C rounded up to a multiple of 256 (as in Llama).
    m.ffn_hidden = has("model.ffn_hidden") ? ffn
                   : llama                 ? (8 * m.width / 3 + 255) / 256 * 256
                                           : 4 * m.width;
    return ok;
  }

  // ---- parallel ----
  void read_parallel(const ast::Section& sec) {
    ParallelSpec& p = s_.parallel;
    std::vector<Field> fields = {
        int_field("world", p.world, 1, kMaxWorld),
        enum_field("sharding", p.sharding, "sharding strategy", kShardingNames),
        int_field("shard_group", p.shard_group, 1, kMaxWorld),
        int_field("ranks_per_node", p.ranks_per_node, 1, kMaxWorld),
        int_field("shard_align", p.shard_align_bytes, 4, 65536),
        {"precision",
         [this, &p](const ast::Entry& e) {
           if (auto* es = block_of(e, "param = bf16  reduce = fp32  master = fp32"))
             read_fields(*es,
                         {dtype_field("param", p.precision.param),
                          dtype_field("reduce", p.precision.reduce),
                          dtype_field("master", p.precision.master),
                          {"loss_scale",
                           [this, &p](const ast::Entry& e) {
                             if (auto* v = value_of(e)) read_loss_scale(*v, p.precision.loss_scale);
                           }}},
                         "'precision'", "parallel.precision.");
         }},
        {"prefetch",
         [this, &p](const ast::Entry& e) {
           if (auto* es = block_of(e, "forward = true  backward = pre  max_inflight = 2"))
             read_fields(*es,
                         {bool_field("forward", p.prefetch.forward),
                          enum_field("backward", p.prefetch.backward, "backward prefetch mode",
                                     kBackwardPrefetchNames),
                          int_field("max_inflight", p.prefetch.max_inflight, 1, kMaxLayers + 1)},
                         "'prefetch'", "parallel.prefetch.");
         }},
        enum_field("recompute", p.recompute, "recompute mode", kRecomputeNames),
        enum_field("offload", p.offload, "offload mode", kOffloadNames),
        {"accumulate",
         [this, &p](const ast::Entry& e) {
           if (auto* es = block_of(e, "micro_batches = 4  reduce = every"))
             read_fields(*es,
                         {int_field("micro_batches", p.accumulate.micro_batches, 1, 65536),
                          enum_field("reduce", p.accumulate.reduce, "accumulation reduce mode",
                                     kAccumulateReduceNames)},
                         "'accumulate'", "parallel.accumulate.");
         }},
    };
    read_fields(sec.entries, fields, "section 'parallel'", "parallel.");
  }

  // A rule between the spec's `key` and `other` is reported at `key`, or at
  // `other`'s flag when the command line replaced it, with `key_note` at `key`.
  Diagnostic& error_between(const std::string& key, const std::string& other, std::string message,
                            std::string key_note) {
    if (!from_command_line(other)) return d_.error(where(key), std::move(message));
    Diagnostic& e = d_.error(where(other), std::move(message));
    Diagnostics::note(e, entry_at_.count(key) ? entry_at_[key] : where(key), std::move(key_note));
    return e;
  }

  void resolve_parallel() {
    ParallelSpec& p = s_.parallel;
    if (!has("parallel.ranks_per_node")) p.ranks_per_node = std::min<int64_t>(p.world, 8);
    const bool sizes_known =
        usable({"parallel.world", "parallel.ranks_per_node", "parallel.shard_group"});
    if (usable({"parallel.world", "parallel.ranks_per_node"}) && p.world % p.ranks_per_node != 0) {
      if (has("parallel.ranks_per_node")) {
        Diagnostic& e = error_between(
            "parallel.ranks_per_node", "parallel.world",
            fmt::format("ranks_per_node ({}) must divide world ({})", p.ranks_per_node, p.world),
            fmt::format("ranks_per_node is {} here", p.ranks_per_node));
        Diagnostics::note(e, "every node runs the same number of ranks");
      } else {
        Diagnostic& e =
            d_.error(where("parallel.world"),
                     fmt::format("world ({}) is not a multiple of the default ranks_per_node ({})",
                                 p.world, p.ranks_per_node));
        Diagnostics::note(e,
                          "set 'ranks_per_node' to the number of ranks on each node; every node "
                          "runs the same number");
      }
    }
    if ((p.shard_align_bytes & (p.shard_align_bytes - 1)) != 0)
      d_.error(
          where("parallel.shard_align"),
          fmt::format("'shard_align' must be a power of two (bytes), got {}", p.shard_align_bytes));
    if (!usable({"parallel.sharding"})) {
      p.shard_group = p.world;
    } else if (is_hybrid(p.sharding)) {
      if (!has("parallel.shard_group")) {
        p.shard_group = p.ranks_per_node;
      } else if (sizes_known && p.world % p.shard_group != 0) {
        Diagnostic& e = error_between(
            "parallel.shard_group", "parallel.world",
            fmt::format("shard_group ({}) must divide world ({})", p.shard_group, p.world),
            fmt::format("shard_group is {} here", p.shard_group));
        if (!has("parallel.world"))
          Diagnostics::note(e, fmt::format("world is {} by default", p.world));
        else if (!from_command_line("parallel.world"))
          Diagnostics::note(e, where("parallel.world"), fmt::format("world is {} here", p.world));
      }
      if (sizes_known && p.world % p.shard_group == 0 &&
          (p.shard_group == p.world || p.shard_group == 1)) {
        Diagnostic& w =
            d_.warning(where("parallel.sharding"),
                       fmt::format("{} with shard_group {} of world {} {}", to_string(p.sharding),
                                   p.shard_group, p.world,
                                   p.shard_group == 1 ? "shards nothing" : "has a single replica"));
        Diagnostics::note(w, p.shard_group == 1 ? "this behaves as 'no_shard'"
                                                : fmt::format("this behaves as '{}'",
                                                              p.sharding == Sharding::HybridShard
                                                                  ? "full_shard"
                                                                  : "shard_grad_op"));
      }
    } else {
      if (has("parallel.shard_group")) {
        Diagnostic& e = d_.error(where("parallel.shard_group"),
                                 "'shard_group' applies only to hybrid sharding");
        std::string hint = "use 'hybrid_shard' or 'hybrid_shard_zero2'";
        if (has("parallel.sharding"))
          Diagnostics::note(e, where("parallel.sharding"),
                            fmt::format("sharding is '{}' here; {}", to_string(p.sharding), hint));
        else
          Diagnostics::note(
              e, fmt::format("sharding is '{}' by default; {}", to_string(p.sharding), hint));
      }
      p.shard_group = non_hybrid_shard_group(p.sharding, p.world);
    }
    if (p.offload == Offload::Cpu && p.sharding == Sharding::NoShard) {
      Diagnostic& e =
          d_.error(where("parallel.offload"), "'offload = cpu' needs a sharded strategy");
      Diagnostics::note(e, where("parallel.sharding"), "sharding is 'no_shard' here");
    }
    bool prefetching = p.prefetch.forward || p.prefetch.backward != BackwardPrefetch::None;
    if (usable({"parallel.prefetch.forward", "parallel.prefetch.backward"}) && prefetching &&
        p.prefetch.max_inflight < 2) {
      Diagnostic& e = d_.error(where("parallel.prefetch.max_inflight"),
                               "prefetch needs max_inflight of at least 2");
      Diagnostics::note(e,
                        "a prefetched unit is gathered while the current one is still in use; "
                        "set 'forward = false' and 'backward = none' to gather one unit at a time");
    }
    const PrecisionSpec& pr = p.precision;
    if (has("parallel.precision.loss_scale") && pr.param != DType::FP16 &&
        pr.reduce != DType::FP16 &&
        usable({"parallel.precision.param", "parallel.precision.reduce"})) {
      Diagnostic& w = d_.warning(where("parallel.precision.loss_scale"),
                                 "loss_scale has no effect without fp16");
      Diagnostics::note(w,
                        "only fp16 param or reduce dtypes scale the loss; bf16 and fp32 "
                        "have the range to do without");
    }
    if (pr.master == DType::FP16) {
      Diagnostic& e =
          d_.error(where("parallel.precision.master"), "fp16 master weights are not supported");
      Diagnostics::note(
          e, "use 'master = fp32' (or bf16); fp16 cannot hold small updates to the weights");
    } else if (usable({"parallel.precision.param"}) &&
               dtype_bytes(pr.master) < dtype_bytes(pr.param)) {
      Diagnostic& e = d_.error(where("parallel.precision.master"),
                               fmt::format("master dtype '{}' is narrower than param dtype '{}'",
                                           to_string(pr.master), to_string(pr.param)));
      Diagnostics::note(
          e, "master weights must hold at least the precision of the parameters they produce");
    }
  }

  // ---- train ----
  void read_train(const ast::Section& sec) {
    TrainSpec& t = s_.train;
    std::vector<Field> fields = {
        {"optimizer",
         [this](const ast::Entry& e) {
           if (auto* v = value_of(e)) read_optimizer(*v);
         }},
        {"lr_schedule",
         [this](const ast::Entry& e) {
           if (auto* v = value_of(e)) read_lr_schedule(*v);
         }},
        int_field("micro_batch", t.micro_batch, 1, 1 << 20),
        int_field("steps", t.steps, 1, kMaxCount),
        {"clip",
         [this, &t](const ast::Entry& e) {
           const ast::Value* v = value_of(e);
           if (!v) return;
           if (v->kind == ast::Value::Kind::Ident && v->text == "none")
             t.clip = 0;
           else if (auto c = v_.as_float(*v, "clip", 0, 1e30, true))
             t.clip = *c;
         }},
        int_field("seed", t.seed, 0, kMaxCount),
        {"data",
         [this](const ast::Entry& e) {
           if (auto* v = value_of(e)) read_data(*v);
         }},
        {"checkpoint", [this](const ast::Entry& e) { read_checkpoint(e); }},
        int_field("log_every", t.log_every, 1, kMaxCount),
    };
    read_fields(sec.entries, fields, "section 'train'", "train.");
  }

  void read_optimizer(const ast::Value& v) {
    OptimizerSpec& o = s_.train.optimizer;
    auto c = v_.callee(v, "optimizer", kOptimizerNames,
                       {std::vector<std::string_view>{"lr", "betas", "eps", "weight_decay"},
                        std::vector<std::string_view>{"lr", "momentum", "weight_decay"}});
    if (!c) return;
    auto& [kind, args] = *c;
    o.kind = static_cast<OptimizerKind>(kind);
    if (o.kind == OptimizerKind::Sgd) o.weight_decay = 0;
    if (args[0])
      if (auto lr = v_.as_float(*args[0], "lr", 0, 1e3, false))
        o.lr = *lr, at_["train.lr"] = args[0]->span;
    if (o.kind == OptimizerKind::AdamW) {
      if (args[1]) read_betas(*args[1]);
      if (args[2])
        if (auto x = v_.as_float(*args[2], "eps", 0, 1, false)) o.eps = *x;
      if (args[3])
        if (auto x = v_.as_float(*args[3], "weight_decay", 0, 1e3, true)) o.weight_decay = *x;
    } else {
      if (args[1])
        if (auto x = v_.as_float(*args[1], "momentum", 0, 0.999999, true)) o.momentum = *x;
      if (args[2])
        if (auto x = v_.as_float(*args[2], "weight_decay", 0, 1e3, true)) o.weight_decay = *x;
    }
  }

  void read_betas(const ast::Value& v) {
    if (v.kind != ast::Value::Kind::Tuple || v.items.size() != 2) {
      d_.error(v.span,
               fmt::format("'betas' must be a pair such as (0.9, 0.95), got {}", describe(v)));
      return;
    }
    auto b1 = v_.as_float(v.items[0], "betas", 0, 0.999999, true);
    auto b2 = v_.as_float(v.items[1], "betas", 0, 0.999999, true);
    if (b1) s_.train.optimizer.beta1 = *b1;
    if (b2) s_.train.optimizer.beta2 = *b2;
  }

  void read_lr_schedule(const ast::Value& v) {
    LrScheduleSpec& l = s_.train.lr_schedule;
    auto c = v_.callee(
        v, "lr schedule", kLrScheduleNames,
        {std::vector<std::string_view>{"warmup"}, std::vector<std::string_view>{"warmup", "min"},
         std::vector<std::string_view>{"warmup", "min"}});
    if (!c) return;
    auto& [kind, args] = *c;
    l.kind = static_cast<LrScheduleKind>(kind);
    if (args[0])
      if (auto w = v_.as_int(*args[0], "warmup", 0, kMaxCount))
        l.warmup = *w, at_["train.warmup"] = args[0]->span;
    if (args.size() > 1 && args[1])
      if (auto m = v_.as_float(*args[1], "min", 0, 1e3, true))
        l.min_lr = *m, at_["train.min_lr"] = args[1]->span;
  }

  void read_data(const ast::Value& v) {
    DataSpec& d = s_.train.data;
    auto c =
        v_.callee(v, "data source", kDataNames,
                  {std::vector<std::string_view>{"seed"}, std::vector<std::string_view>{"path"},
                   std::vector<std::string_view>{"path"}});
    if (!c) return;
    auto& [kind, args] = *c;
    d.kind = static_cast<DataKind>(kind);
    if (d.kind == DataKind::Synthetic) {
      if (args[0])
        if (auto s = v_.as_int(*args[0], "seed", 0, kMaxCount)) d.seed = *s;
      return;
    }
    if (v.kind == ast::Value::Kind::Ident || !v_.require(args[0], v, "path")) {
      if (v.kind == ast::Value::Kind::Ident)
        d_.error(v.span,
                 fmt::format("data source '{}' needs a file: {}(\"path\")", v.text, v.text));
      return;
    }
    if (auto p = v_.as_string(*args[0], "path")) d.path = *p;
  }

  // dynamic | dynamic(init = 65536, interval = 2000) | static(1024)
  void read_loss_scale(const ast::Value& v, LossScaleSpec& l) {
    auto c = v_.callee(v, "loss scale", kLossScaleNames,
                       {std::vector<std::string_view>{"init", "interval"},
                        std::vector<std::string_view>{"scale"}});
    if (!c) return;
    auto& [kind, args] = *c;
    l.kind = static_cast<LossScaleKind>(kind);
    if (l.kind == LossScaleKind::Static && !v_.require(args[0], v, "scale")) return;
    if (args[0])
      if (auto s = v_.as_float(*args[0], l.kind == LossScaleKind::Static ? "scale" : "init", 1,
                               4294967296.0, true))
        l.init = *s;
    if (args.size() > 1 && args[1])
      if (auto n = v_.as_int(*args[1], "interval", 1, kMaxCount)) l.interval = *n;
  }

  // checkpoint(every = N, dir = "ckpt", keep = 2) | checkpoint = none
  void read_checkpoint(const ast::Entry& e) {
    CheckpointSpec& c = s_.train.checkpoint;
    if (e.kind == ast::Entry::Kind::Assign && e.value.kind == ast::Value::Kind::Ident &&
        e.value.text == "none") {
      c.enabled = false;
      return;
    }
    if (e.kind != ast::Entry::Kind::Call) {
      d_.error(e.span,
               "expected 'checkpoint(every = N, dir = \"ckpt\", keep = 2)' or 'checkpoint = none'");
      return;
    }
    auto args = v_.bind(e.value, {"every", "dir", "keep"});
    if (!args) return;
    if (!v_.require((*args)[0], e.value, "every")) return;
    c.enabled = true;
    if (auto n = v_.as_int(*(*args)[0], "every", 1, kMaxCount))
      c.every = *n, at_["train.checkpoint.every"] = (*args)[0]->span;
    if ((*args)[1])
      if (auto d = v_.as_string(*(*args)[1], "dir")) c.dir = *d;
    if ((*args)[2])
      if (auto k = v_.as_int(*(*args)[2], "keep", 1, 1 << 20)) c.keep = *k;
  }

  void check_train() {
    const TrainSpec& t = s_.train;
    auto steps_note = [&](Diagnostic& d) {
      if (has("train.steps"))
        Diagnostics::note(d, where("train.steps"), "steps is set here");
      else
        Diagnostics::note(d, fmt::format("steps is {} by default", t.steps));
    };
    if (usable({"train.lr_schedule", "train.steps"}) && t.lr_schedule.warmup > t.steps) {
      Diagnostic& e = d_.error(where("train.warmup", where("train.lr_schedule")),
                               fmt::format("warmup ({} steps) is longer than the run ({} steps)",
                                           t.lr_schedule.warmup, t.steps));
      steps_note(e);
    }
    if (usable({"train.lr_schedule", "train.optimizer"}) && t.lr_schedule.min_lr > t.optimizer.lr) {
      Diagnostic& e = d_.error(where("train.min_lr", where("train.lr_schedule")),
                               fmt::format("min learning rate {} exceeds the optimizer's lr {}",
                                           t.lr_schedule.min_lr, t.optimizer.lr));
      if (has("train.lr"))
        Diagnostics::note(e, where("train.lr"), "lr is set here");
      else
        Diagnostics::note(e, fmt::format("the optimizer's lr is {} by default", t.optimizer.lr));
    }
    if (usable({"train.checkpoint", "train.steps"}) && t.checkpoint.enabled &&
        t.checkpoint.every > t.steps) {
      Diagnostic& w =
          d_.warning(where("train.checkpoint.every"),
                     fmt::format("checkpoint every {} steps never fires in a run of {} steps; only "
                                 "the final checkpoint is written",
                                 t.checkpoint.every, t.steps));
      steps_note(w);
    }
  }

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

  Diagnostics& d_;
  ValueReader v_;
  const SpecOverrides& overrides_;
  bool syntax_errors_ = false;
  Spec s_;
  std::map<std::string, Span> at_;        // "parallel.world" -> where it was written
  std::map<std::string, Span> entry_at_;  // "parallel.world" -> its whole `key = value`
  std::set<std::string> bad_;             // keys whose value was rejected (see usable())
};

}  // namespace

std::optional<Spec> check(const ast::File& file, Diagnostics& diags,
                          const SpecOverrides& overrides) {
  return Checker(diags, overrides).run(file);
}

}  // namespace fsdpgen
