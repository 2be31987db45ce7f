// Fields: reading sections against their key tables (KeyTable.cpp), the
// complex values' readers, and the defaults and overrides of keys; see
// Fields.h.
#include "dsl/Fields.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dsl/KeyTable.h"
#include "dsl/Literals.h"
#include "dsl/Values.h"
#include "runtime/limits.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {

void FieldReader::read_entries(const std::vector<ast::Entry>& entries,
                               const std::vector<std::string_view>& names,
                               const std::function<void(size_t, const ast::Entry&)>& read,
                               const std::string& section, const std::string& prefix) {
  std::string outer = std::exchange(this->prefix, prefix);
  std::map<std::string, const ast::Entry*> seen;
  for (const ast::Entry& e : entries) {
    if (e.kind == ast::Entry::Kind::Error) {
      // Already reported by the parser: the key is given, its value unknown.
      keys.value_at[prefix + e.key] = e.key_span;
      keys.rejected.insert(prefix + e.key);
      continue;
    }
    auto [it, fresh] = seen.emplace(e.key, &e);
    if (!fresh) {
      Diagnostic& x =
          diags.error(e.key_span, fmt::format("duplicate key '{}' in {}", e.key, section));
      Diagnostics::note(x, it->second->key_span, "previous definition is here");
      continue;
    }
    auto f = std::find(names.begin(), names.end(), e.key);
    if (f == names.end()) {
      Diagnostic& x =
          diags.error(e.key_span, fmt::format("unknown key '{}' in {}", e.key, section));
      std::string m = closest_match(e.key, names);
      if (!m.empty())
        x.message += fmt::format("; did you mean '{}'?", m);
      else
        Diagnostics::note(x, fmt::format("valid keys are {}", quoted_choices(names, " and ")));
      continue;
    }
    keys.value_at[prefix + e.key] = e.kind == ast::Entry::Kind::Assign ? e.value.span : e.span;
    keys.entry_at[prefix + e.key] = e.span;
    size_t errors_before = diags.error_count();
    read(static_cast<size_t>(f - names.begin()), e);
    if (diags.error_count() != errors_before) keys.rejected.insert(prefix + e.key);
  }
  this->prefix = outer;
}

const ast::Value* FieldReader::value_of(const ast::Entry& e) {
  if (e.kind == ast::Entry::Kind::Block) {
    diags.error(e.key_span,
                fmt::format("'{}' takes a value, not a block; write '{} = ...'", e.key, e.key));
    return nullptr;
  }
  if (e.kind == ast::Entry::Kind::Call) {
    diags.error(e.key_span,
                fmt::format("'{}' takes a value, not arguments; write '{} = ...'", e.key, e.key));
    return nullptr;
  }
  return &e.value;
}

const std::vector<ast::Entry>* FieldReader::block_of(const ast::Entry& e,
                                                     std::string_view example) {
  if (e.kind != ast::Entry::Kind::Block) {
    Diagnostic& x = diags.error(e.span, fmt::format("'{}' is a block, not a value", e.key));
    Diagnostics::note(x, fmt::format("write '{} {{ {} }}'", e.key, example));
    return nullptr;
  }
  return &e.entries;
}

// guard { loss_z = 6  norm_z = 6  window = 100  max_skips = 5 }, or guard = none.
void FieldReader::read_guard(const ast::Entry& e) {
  GuardSpec& g = spec.train.guard;
  if (e.kind == ast::Entry::Kind::Assign && e.value.kind == ast::Value::Kind::Ident &&
      e.value.text == "none") {
    g = GuardSpec{};
    return;
  }
  const std::vector<ast::Entry>* es = block_of(e, "loss_z = 6  norm_z = 6  window = 100");
  if (!es) return;
  read_fields(*es, guard_keys(), g, "'guard'", "train.guard.");
  if (!keys.has("train.guard.loss_z") && !keys.has("train.guard.norm_z") && !syntax_errors) {
    Diagnostic& x = diags.error(e.key_span, "'guard' sets neither 'loss_z' nor 'norm_z'");
    Diagnostics::note(x, "write 'guard { loss_z = 6  norm_z = 6 }', or 'guard = none' for none");
  }
}

// offload = cpu (the parameters' state), or offload { params = cpu  activations = cpu }
void FieldReader::read_offload(const ast::Entry& e, ParallelSpec& p) {
  if (e.kind == ast::Entry::Kind::Assign) {
    if (auto o = vals.as_enum<Offload>(e.value, "offload mode", kOffloadNames)) p.offload = *o;
    return;
  }
  OffloadBlock b{p.offload, Offload::None};
  if (auto* es = block_of(e, "params = cpu  activations = cpu"))
    read_fields(*es, offload_keys(), b, "'offload'", "parallel.offload.");
  p.offload = b.params;
  p.offload_activations = b.activations == Offload::Cpu;
}

// adamw(lr, betas, eps, weight_decay) | sgd(lr, momentum, weight_decay) |
// muon(lr, momentum, nesterov, ns_steps, ns_dtype, weight_decay, adjust_lr,
// adamw = adamw(...)).
void FieldReader::read_optimizer(const ast::Value& v) {
  OptimizerSpec& o = spec.train.optimizer;
  auto c = vals.callee(
      v, "optimizer", kOptimizerNames,
      {std::vector<std::string_view>{"lr", "betas", "eps", "weight_decay"},
       std::vector<std::string_view>{"lr", "momentum", "weight_decay"},
       std::vector<std::string_view>{"lr", "momentum", "nesterov", "ns_steps", "ns_dtype",
                                     "weight_decay", "adjust_lr", "adamw"}});
  if (!c) return;
  auto& [kind, args] = *c;
  o.kind = static_cast<OptimizerKind>(kind);
  if (o.kind == OptimizerKind::Sgd) o.weight_decay = 0;
  if (o.kind == OptimizerKind::Muon) o.lr = kMuonLr, o.momentum = kMuonMomentum, o.weight_decay = 0;
  if (args[0])
    if (auto lr = vals.as_float(*args[0], "lr", 0, 1e3, false))
      o.lr = *lr, keys.value_at["train.lr"] = args[0]->span;
  if (o.kind == OptimizerKind::AdamW) {
    AdamWSpec a{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay};
    read_adamw_rest(args, a);
    o.beta1 = a.beta1, o.beta2 = a.beta2, o.eps = a.eps, o.weight_decay = a.weight_decay;
    return;
  }
  const ast::Value* momentum = args[1];
  const ast::Value* weight_decay = o.kind == OptimizerKind::Sgd ? args[2] : args[5];
  if (momentum)
    if (auto x = vals.as_float(*momentum, "momentum", 0, 0.999999, true)) o.momentum = *x;
  if (weight_decay)
    if (auto x = vals.as_float(*weight_decay, "weight_decay", 0, 1e3, true)) o.weight_decay = *x;
  if (o.kind == OptimizerKind::Muon) read_muon(args, o);
}

// adamw(...)'s betas, eps and weight_decay (args 1-3; the caller reads lr).
void FieldReader::read_adamw_rest(const std::vector<const ast::Value*>& args, AdamWSpec& a) {
  if (args[1]) read_betas(*args[1], a);
  if (args[2])
    if (auto x = vals.as_float(*args[2], "eps", 0, 1, false)) a.eps = *x;
  if (args[3])
    if (auto x = vals.as_float(*args[3], "weight_decay", 0, 1e3, true)) a.weight_decay = *x;
}

// muon(...)'s own arguments after lr and momentum.
void FieldReader::read_muon(const std::vector<const ast::Value*>& args, OptimizerSpec& o) {
  if (args[2])
    if (auto x = vals.as_bool(*args[2], "nesterov")) o.nesterov = *x;
  if (args[3])
    if (auto x = vals.as_int(*args[3], "ns_steps", 0, kMaxMuonNsSteps)) o.ns_steps = *x;
  if (args[4])
    if (auto x = vals.as_dtype(*args[4])) {
      if (*x == DType::FP16) {
        Diagnostic& d = diags.error(args[4]->span, "'ns_dtype' must be fp32 or bf16, got fp16");
        Diagnostics::note(d, "Newton-Schulz runs in fp32 (the default) or in bf16, as torch's");
      } else {
        o.ns_dtype = *x;
      }
    }
  if (args[6])
    if (auto x = vals.as_enum<MuonAdjust>(*args[6], "adjust_lr rule", kMuonAdjustNames))
      o.adjust_lr = *x;
  if (!args[7]) return;
  const ast::Value& n = *args[7];
  keys.value_at["train.adamw"] = n.span;
  auto c = vals.callee(n, "nested optimizer", std::array<std::string_view, 1>{"adamw"},
                       {std::vector<std::string_view>{"lr", "betas", "eps", "weight_decay"}});
  if (!c) return;
  const std::vector<const ast::Value*>& a = c->second;
  if (a[0])
    if (auto lr = vals.as_float(*a[0], "lr", 0, 1e3, false)) o.adamw.lr = *lr;
  read_adamw_rest(a, o.adamw);
}

// llama3(factor = 32, low_freq = 1, high_freq = 4, original_context = 8192)
// or linear(factor = 8): every argument required.
std::optional<RopeScalingSpec> FieldReader::read_rope_scaling(const ast::Value& v) {
  // Each of kRopeScalingNames' arguments.
  const std::array<std::vector<std::string_view>, kRopeScalingNames.size()> params = {
      {{"factor", "low_freq", "high_freq", "original_context"}, {"factor"}}};
  auto c = vals.callee(v, "rope scaling", kRopeScalingNames, params);
  if (!c) return std::nullopt;
  const std::vector<const ast::Value*>& args = c->second;
  RopeScalingSpec r;
  r.enabled = true;
  r.linear = kRopeScalingNames[c->first] == "linear";
  bool ok = true;
  for (size_t i = 0; i < args.size(); ++i)
    ok = vals.require(args[i], v, params[c->first][i]) && ok;
  if (!ok) return std::nullopt;
  auto factor = vals.as_float(*args[0], "factor", 1, 1e6, true);
  if (r.linear) {
    if (!factor) return std::nullopt;
    r.factor = *factor;
    return r;
  }
  auto low = vals.as_float(*args[1], "low_freq", 0, 1e6, false);
  auto high = vals.as_float(*args[2], "high_freq", 0, 1e6, false);
  auto original = vals.as_int(*args[3], "original_context", 1, kMaxContext);
  if (!factor || !low || !high || !original) return std::nullopt;
  if (*low >= *high) {
    diags.error(args[1]->span,
                fmt::format("rope scaling's low_freq ({}) must be below high_freq ({})",
                            format_real(*low), format_real(*high)));
    return std::nullopt;
  }
  r.factor = *factor;
  r.low_freq = *low;
  r.high_freq = *high;
  r.original_context = *original;
  return r;
}

void FieldReader::read_betas(const ast::Value& v, AdamWSpec& a) {
  if (v.kind != ast::Value::Kind::Tuple || v.items.size() != 2) {
    diags.error(v.span,
                fmt::format("'betas' must be a pair such as (0.9, 0.95), got {}", describe(v)));
    return;
  }
  auto b1 = vals.as_float(v.items[0], "betas", 0, 0.999999, true);
  auto b2 = vals.as_float(v.items[1], "betas", 0, 0.999999, true);
  if (b1) a.beta1 = *b1;
  if (b2) a.beta2 = *b2;
}

// constant(warmup) | cosine(warmup, min | min_ratio) | linear(warmup, min | min_ratio):
// min is the optimizer's lr at the last step, min_ratio that floor as a
// fraction of each parameter group's peak lr.
void FieldReader::read_lr_schedule(const ast::Value& v) {
  LrScheduleSpec& l = spec.train.lr_schedule;
  auto c = vals.callee(v, "lr schedule", kLrScheduleNames,
                       {std::vector<std::string_view>{"warmup"},
                        std::vector<std::string_view>{"warmup", "min", "min_ratio"},
                        std::vector<std::string_view>{"warmup", "min", "min_ratio"}});
  if (!c) return;
  auto& [kind, args] = *c;
  l.kind = static_cast<LrScheduleKind>(kind);
  if (args[0])
    if (auto w = vals.as_int(*args[0], "warmup", 0, kMaxCount))
      l.warmup = *w, keys.value_at["train.warmup"] = args[0]->span;
  if (args.size() < 3) return;
  if (args[1] && args[2]) {
    Diagnostic& e = diags.error(
        args[2]->span, "'min' and 'min_ratio' both set the schedule's floor; give one of them");
    Diagnostics::note(e, args[1]->span, "'min' is set here");
    Diagnostics::note(e,
                      "min_ratio is a fraction of each parameter group's peak lr (e.g. 0.1); min "
                      "is an absolute lr");
    return;
  }
  if (args[1])
    if (auto m = vals.as_float(*args[1], "min", 0, 1e3, true))
      l.min_lr = *m, keys.value_at["train.min_lr"] = args[1]->span;
  if (args[2])
    if (auto r = vals.as_float(*args[2], "min_ratio", 0, 1, true))
      l.min_ratio = *r, keys.value_at["train.min_ratio"] = args[2]->span;
}

// synthetic | synthetic(seed = 7) | text("input.txt"[, allow_bytes = true]) |
// tokens("train_*.bin", "more.bin") (or tokens(["a.bin", "b.bin"])): files and glob
// patterns, read in the order given.
void FieldReader::read_data(const ast::Value& v, DataSpec& d, std::string_view key) {
  const bool files = v.kind == ast::Value::Kind::Call && (v.text == "text" || v.text == "tokens");
  if (!files) {
    auto c =
        vals.callee(v, "data source", kDataNames,
                    {std::vector<std::string_view>{"seed"}, std::vector<std::string_view>{"path"},
                     std::vector<std::string_view>{"path"}});
    if (!c) return;
    auto& [kind, args] = *c;
    d.kind = static_cast<DataKind>(kind);
    if (d.kind == DataKind::Synthetic) {
      if (args[0])
        if (auto s = vals.as_int(*args[0], "seed", 0, kMaxCount)) d.seed = *s;
      return;
    }
    diags.error(v.span, fmt::format("data source '{}' needs a file: {} = {}(\"path\")", v.text, key,
                                    v.text));
    return;
  }
  d.kind = v.text == "text" ? DataKind::Text : DataKind::Tokens;
  d.paths.clear();
  d.allow_bytes = false;
  size_t paths_given = 0;
  for (const ast::Arg& a : v.args) {
    if (a.name == "allow_bytes" && d.kind == DataKind::Text) {
      if (auto b = vals.as_bool(a.value, "allow_bytes")) d.allow_bytes = *b;
      continue;
    }
    ++paths_given;
    if (!a.name.empty() && a.name != "path") {
      Diagnostic& e =
          diags.error(a.name_span, fmt::format("unknown argument '{}' of '{}'", a.name, v.text));
      Diagnostics::note(e, fmt::format("'{}' takes file paths or glob patterns, e.g. "
                                       "{}(\"fineweb_train_*.bin\"){}",
                                       v.text, v.text,
                                       d.kind == DataKind::Text ? ", and allow_bytes = true" : ""));
      continue;
    }
    if (a.value.kind == ast::Value::Kind::List) {
      for (const ast::Value& item : a.value.items)
        if (auto p = vals.as_string(item, "path")) d.paths.push_back(*p);
    } else if (auto p = vals.as_string(a.value, "path")) {
      d.paths.push_back(*p);
    }
  }
  if (paths_given == 0)
    diags.error(v.span, fmt::format("data source '{}' needs a file: {} = {}(\"path\")", v.text, key,
                                    v.text));
  else if (d.kind == DataKind::Text && d.paths.size() > 1)
    diags.error(v.span, fmt::format("text data is one file; {} paths given (token files can be "
                                    "many: tokens(\"a.bin\", \"b.bin\"))",
                                    d.paths.size()));
}

// dynamic | dynamic(init = 65536, interval = 2000) | static(1024)
void FieldReader::read_loss_scale(const ast::Value& v, LossScaleSpec& l) {
  auto c = vals.callee(
      v, "loss scale", kLossScaleNames,
      {std::vector<std::string_view>{"init", "interval"}, std::vector<std::string_view>{"scale"}});
  if (!c) return;
  auto& [kind, args] = *c;
  l.kind = static_cast<LossScaleKind>(kind);
  if (l.kind == LossScaleKind::Static && !vals.require(args[0], v, "scale")) return;
  if (args[0])
    if (auto s = vals.as_float(*args[0], l.kind == LossScaleKind::Static ? "scale" : "init", 1,
                               4294967296.0, true))
      l.init = *s;
  if (args.size() > 1 && args[1])
    if (auto n = vals.as_int(*args[1], "interval", 1, kMaxCount)) l.interval = *n;
}

// checkpoint(every = N, dir = "ckpt", keep = 2) | checkpoint = none
void FieldReader::read_checkpoint(const ast::Entry& e) {
  CheckpointSpec& c = spec.train.checkpoint;
  if (e.kind == ast::Entry::Kind::Assign && e.value.kind == ast::Value::Kind::Ident &&
      e.value.text == "none") {
    c.enabled = false;
    return;
  }
  if (e.kind != ast::Entry::Kind::Call) {
    diags.error(
        e.span,
        "expected 'checkpoint(every = N, dir = \"ckpt\", keep = 2)' or 'checkpoint = none'");
    return;
  }
  auto args = vals.bind(e.value, {"every", "dir", "keep"});
  if (!args) return;
  if (!vals.require((*args)[0], e.value, "every")) return;
  c.enabled = true;
  if (auto n = vals.as_int(*(*args)[0], "every", 1, kMaxCount))
    c.every = *n, keys.value_at["train.checkpoint.every"] = (*args)[0]->span;
  if ((*args)[1])
    if (auto d = vals.as_string(*(*args)[1], "dir")) c.dir = *d;
  if ((*args)[2])
    if (auto k = vals.as_int(*(*args)[2], "keep", 1, 1 << 20)) c.keep = *k;
}

namespace {

// A value given on the command line replaces the spec's `key`.
void override_int(CheckContext& ctx, const char* flag, int64_t v, int64_t lo, int64_t hi,
                  int64_t& out, const std::string& key) {
  Diagnostics& d = ctx.diags;
  const std::string given = fmt::format("--{} {}", flag, v);
  if (v < lo || v > hi) {
    d.error(d.command_line(given), fmt::format("must be between {} and {}", lo, grouped(hi)));
    return;
  }
  out = v;
  std::optional<DiagNote> replaced;
  if (auto it = ctx.keys.entry_at.find(key); it != ctx.keys.entry_at.end())
    replaced = DiagNote{true, it->second,
                        fmt::format("the spec says {} = {} here", key.substr(key.rfind('.') + 1),
                                    d.file().slice(ctx.keys.where(key)))};
  ctx.keys.value_at[key] = d.command_line(given, replaced);
}

}  // namespace

bool read_model(const ast::Section& sec, CheckContext& ctx) {
  ModelSpec& m = ctx.spec.model;
  m.name = sec.name;
  std::string section = m.name.empty() ? "section 'model'" : fmt::format("model '{}'", m.name);
  FieldReader(ctx).read_fields(sec.entries, model_keys(), m, section, "model.");
  std::vector<std::string_view> missing;
  for (std::string_view k : {"vocab", "context", "width", "heads", "layers"})
    if (!ctx.keys.has(fmt::format("model.{}", k))) missing.push_back(k);
  if (missing.empty()) return true;
  if (!ctx.after_syntax_errors) {
    Diagnostic& e =
        ctx.diags.error(sec.name.empty() ? sec.kind_span : sec.name_span,
                        fmt::format("{} is missing {}", section, quoted_choices(missing, " and ")));
    Diagnostics::note(e, "a model must set 'vocab', 'context', 'width', 'heads' and 'layers'");
  }
  return false;
}

void read_parallel(const ast::Section& sec, CheckContext& ctx) {
  FieldReader(ctx).read_fields(sec.entries, parallel_keys(), ctx.spec.parallel,
                               "section 'parallel'", "parallel.");
}

void read_train(const ast::Section& sec, CheckContext& ctx) {
  FieldReader(ctx).read_fields(sec.entries, train_keys(), ctx.spec.train, "section 'train'",
                               "train.");
}

void fill_model_defaults(CheckContext& ctx) {
  ModelSpec& m = ctx.spec.model;
  const Keys& keys = ctx.keys;
  bool llama = m.family == Family::Llama;
  if (!keys.has("model.tie_embeddings")) m.tie_embeddings = !llama;
  if (!keys.has("model.kv_heads")) m.kv_heads = m.heads;
  if (!llama || !keys.has("model.rope_theta")) m.rope_theta = 10000.0;
  // llama: SwiGLU hidden = 2/3 of 4C rounded up to a multiple of 256 (as in Llama).
  if (!keys.has("model.ffn_hidden"))
    m.ffn_hidden = llama ? (8 * m.width / 3 + 255) / 256 * 256 : 4 * m.width;
}

void fill_parallel_defaults(CheckContext& ctx) {
  ParallelSpec& p = ctx.spec.parallel;
  const Keys& keys = ctx.keys;
  if (!keys.has("parallel.ranks_per_node")) p.ranks_per_node = std::min<int64_t>(p.world, 8);
  if (!keys.usable({"parallel.sharding"}))
    p.shard_group = p.world;
  else if (!is_hybrid(p.sharding))
    p.shard_group = non_hybrid_shard_group(p.sharding, p.world);
  else if (!keys.has("parallel.shard_group"))
    p.shard_group = p.ranks_per_node;
}

void fill_train_defaults(CheckContext& ctx) {
  LrScheduleSpec& l = ctx.spec.train.lr_schedule;
  if (l.min_ratio) l.min_lr = *l.min_ratio * ctx.spec.train.optimizer.lr;
}

void override_world(CheckContext& ctx, int64_t world) {
  override_int(ctx, "world", world, 1, kMaxWorld, ctx.spec.parallel.world, "parallel.world");
}

void override_micro_batch(CheckContext& ctx, int64_t micro_batch) {
  override_int(ctx, "micro-batch", micro_batch, 1, kMaxMicroBatch, ctx.spec.train.micro_batch,
               "train.micro_batch");
}

}  // namespace fsdpgen
