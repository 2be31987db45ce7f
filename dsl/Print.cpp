// Print: Spec -> canonical spec-language text.
#include "dsl/Print.h"

#include <fmt/format.h>

#include "dsl/Layers.h"
#include "dsl/Units.h"

namespace fsdpgen {

std::string format_real(double x) {
  return fmt::format("{}", x);
}

namespace {

// [embed, block 0..3, block 4.ln_1, block 4.attn.c_attn, final_norm]
std::string layer_list(const ModelSpec& m, const std::vector<LayerId>& layers) {
  std::vector<std::string> parts;
  for (const LayerRun& r : layer_runs(layers))
    if (r.first.kind != LayerId::Kind::Block || r.first.block == r.last_block)
      parts.push_back(layer_name(m, r.first));
    else
      parts.push_back(fmt::format("block {}..{}", r.first.block, r.last_block));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + "\"";
}

void print_model(const ModelSpec& m, std::string& out) {
  out += fmt::format("model {} {{\n", m.name);
  out += fmt::format("  family = {}\n", to_string(m.family));
  out += fmt::format("  vocab = {}\n", m.vocab);
  out += fmt::format("  context = {}\n", m.context);
  out += fmt::format("  width = {}\n", m.width);
  out += fmt::format("  heads = {}\n", m.heads);
  if (m.family == Family::Llama) out += fmt::format("  kv_heads = {}\n", m.kv_heads);
  out += fmt::format("  layers = {}\n", m.layers);
  out += fmt::format("  ffn_hidden = {}\n", m.ffn_hidden);
  out += fmt::format("  tie_embeddings = {}\n", m.tie_embeddings);
  out += fmt::format("  pad_vocab_to = {}\n", m.pad_vocab_to);
  out += fmt::format("  norm_eps = {}\n", format_real(m.norm_eps));
  if (m.family == Family::Llama)
    out += fmt::format("  rope_theta = {}\n", format_real(m.rope_theta));
  if (m.family == Family::Llama && m.rope_scaling.enabled) {
    const RopeScalingSpec& r = m.rope_scaling;
    out += fmt::format(
        "  rope_scaling = llama3(factor = {}, low_freq = {}, high_freq = {}, original_context = "
        "{})\n",
        format_real(r.factor), format_real(r.low_freq), format_real(r.high_freq),
        r.original_context);
  }
  out += fmt::format("}}\n");
}

// "a.h" for one path, ["a.h", "b.h"] for several.
std::string path_or_list(const std::vector<std::string>& paths) {
  std::vector<std::string> q;
  for (const std::string& p : paths)
    q.push_back(quoted(p));
  return q.size() == 1 ? q[0] : fmt::format("[{}]", fmt::join(q, ", "));
}

void print_layers(const ModelSpec& m, std::string& out) {
  if (m.custom.empty()) return;
  out += fmt::format("layers {{\n  import = {}\n", path_or_list(m.layer_headers));
  if (!m.layer_cuda_sources.empty())
    out += fmt::format("  cuda = {}\n", path_or_list(m.layer_cuda_sources));
  for (const CustomLayerSpec& c : m.custom) {
    std::vector<std::string> args;
    for (const CustomLayerSpec::Hyper& h : c.hyper)
      args.push_back(
          fmt::format("{} = {}", h.name, h.from.empty() ? std::to_string(h.value) : h.from));
    out += fmt::format("  {} = {}({})\n", c.module, c.layer, fmt::join(args, ", "));
  }
  out += "}\n";
}

void print_units(const Spec& s, std::string& out) {
  const UnitsSpec& u = s.units;
  out += "units {\n";
  for (const UnitSpec& x : u.explicit_units)
    if (!x.layers.empty())
      out += fmt::format("  unit {} {}\n", x.name, layer_list(s.model, x.layers));
  switch (u.policy) {
    case UnitPolicy::EachBlock:
      out += "  each block\n";
      break;
    case UnitPolicy::EachLinear:
      out += "  each linear\n";
      break;
    case UnitPolicy::Group:
      out += fmt::format("  group {} blocks\n", u.group);
      break;
    case UnitPolicy::MinParams:
      out += fmt::format("  min_params {}\n", u.min_params);
      break;
    case UnitPolicy::Explicit:
      break;
  }
  out += fmt::format("  # resolved: {} units (unit: layers, parameters)\n", u.units.size());
  for (size_t i = 0; i < u.units.size(); ++i) {
    int64_t n = 0;
    for (const LayerId& l : u.units[i].layers)
      n += layer_params(s.model, l);
    out += fmt::format("  #   {} {}: {}, {}\n", i, u.units[i].name,
                       layer_list(s.model, u.units[i].layers), n);
  }
  out += "}\n";
}

void print_parallel(const ParallelSpec& p, std::string& out) {
  out += "parallel {\n";
  out += fmt::format("  world = {}\n", p.world);
  out += fmt::format("  sharding = {}\n", to_string(p.sharding));
  if (is_hybrid(p.sharding)) out += fmt::format("  shard_group = {}\n", p.shard_group);
  out += fmt::format("  ranks_per_node = {}\n", p.ranks_per_node);
  out += fmt::format("  shard_align = {}\n", p.shard_align_bytes);
  const PrecisionSpec& pr = p.precision;
  const LossScaleSpec& ls = pr.loss_scale;
  // The loss scale where it matters (fp16) or was changed.
  std::string loss_scale;
  if (pr.param == DType::FP16 || pr.reduce == DType::FP16 || ls != LossScaleSpec{})
    loss_scale =
        ls.kind == LossScaleKind::Static
            ? fmt::format("  loss_scale = static({})", ls.init)
            : fmt::format("  loss_scale = dynamic(init = {}, interval = {})", ls.init, ls.interval);
  out += fmt::format("  precision {{ param = {}  reduce = {}  master = {}{} }}\n",
                     to_string(pr.param), to_string(pr.reduce), to_string(pr.master), loss_scale);
  out += fmt::format("  prefetch {{ forward = {}  backward = {}  max_inflight = {} }}\n",
                     p.prefetch.forward, to_string(p.prefetch.backward), p.prefetch.max_inflight);
  out += fmt::format("  recompute = {}\n", to_string(p.recompute));
  if (p.offload_activations)
    out += fmt::format("  offload {{ params = {}  activations = cpu }}\n", to_string(p.offload));
  else
    out += fmt::format("  offload = {}\n", to_string(p.offload));
  out += fmt::format("  accumulate {{ micro_batches = {}  reduce = {} }}\n",
                     p.accumulate.micro_batches, to_string(p.accumulate.reduce));
  out += "}\n";
}

// synthetic(seed = 7), text("input.txt"), tokens("a_*.bin", "b.bin")
std::string data_source(const DataSpec& d) {
  if (d.kind == DataKind::Synthetic) return fmt::format("synthetic(seed = {})", d.seed);
  std::string paths;
  for (const std::string& p : d.paths)
    paths += (paths.empty() ? "" : ", ") + quoted(p);
  return fmt::format("{}({})", to_string(d.kind), paths);
}

// adamw(lr = 0.0003, betas = (0.9, 0.95), eps = 1e-08, weight_decay = 0.1)
std::string adamw_call(const AdamWSpec& a) {
  return fmt::format("adamw(lr = {}, betas = ({}, {}), eps = {}, weight_decay = {})",
                     format_real(a.lr), format_real(a.beta1), format_real(a.beta2),
                     format_real(a.eps), format_real(a.weight_decay));
}

void print_train(const TrainSpec& t, std::string& out) {
  const OptimizerSpec& o = t.optimizer;
  out += "train {\n";
  if (o.kind == OptimizerKind::AdamW)
    out += fmt::format("  optimizer = {}\n",
                       adamw_call({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}));
  else if (o.kind == OptimizerKind::Sgd)
    out += fmt::format("  optimizer = sgd(lr = {}, momentum = {}, weight_decay = {})\n",
                       format_real(o.lr), format_real(o.momentum), format_real(o.weight_decay));
  else
    out += fmt::format(
        "  optimizer = muon(lr = {}, momentum = {}, nesterov = {}, ns_steps = {}, ns_dtype = {}, "
        "weight_decay = {}, adjust_lr = {},\n                   adamw = {})\n",
        format_real(o.lr), format_real(o.momentum), o.nesterov, o.ns_steps, to_string(o.ns_dtype),
        format_real(o.weight_decay), to_string(o.adjust_lr), adamw_call(o.adamw));
  const LrScheduleSpec& l = t.lr_schedule;
  if (l.kind == LrScheduleKind::Constant)
    out += fmt::format("  lr_schedule = constant(warmup = {})\n", l.warmup);
  else
    out += fmt::format("  lr_schedule = {}(warmup = {}, min = {})\n", to_string(l.kind), l.warmup,
                       format_real(l.min_lr));
  out += fmt::format("  micro_batch = {}\n", t.micro_batch);
  out += fmt::format("  steps = {}\n", t.steps);
  out += t.clip > 0 ? fmt::format("  clip = {}\n", format_real(t.clip)) : "  clip = none\n";
  out += fmt::format("  seed = {}\n", t.seed);
  out += fmt::format("  data = {}\n", data_source(t.data));
  out += fmt::format("  shuffle = {}\n", t.shuffle ? "true" : "false");
  if (t.val) {
    out += fmt::format("  val = {}\n", data_source(*t.val));
    out += fmt::format("  val_every = {}\n", t.val_every);
    out += fmt::format("  val_sequences = {}\n", t.val_sequences);
  } else {
    out += "  val = none\n";
  }
  if (t.checkpoint.enabled)
    out += fmt::format("  checkpoint(every = {}, dir = {}, keep = {})\n", t.checkpoint.every,
                       quoted(t.checkpoint.dir), t.checkpoint.keep);
  else
    out += "  checkpoint = none\n";
  out += fmt::format("  log_every = {}\n", t.log_every);
  if (t.stall_timeout != kDefaultStallTimeoutSeconds)
    out += fmt::format("  stall_timeout = {}\n", format_real(t.stall_timeout));
  if (const GuardSpec& g = t.guard; g != GuardSpec{})
    out += fmt::format("  guard {{ loss_z = {}  norm_z = {}  window = {}  max_skips = {} }}\n",
                       format_real(g.loss_z), format_real(g.norm_z), g.window, g.max_skips);
  out += "}\n";
}

}  // namespace

std::string print_spec(const Spec& spec) {
  std::string out;
  print_model(spec.model, out);
  print_layers(spec.model, out);
  print_units(spec, out);
  print_parallel(spec.parallel, out);
  print_train(spec.train, out);
  return out;
}

}  // namespace fsdpgen
