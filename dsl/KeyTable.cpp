// KeyTable: the tables of keys of each section; see KeyTable.h.
#include "dsl/KeyTable.h"

namespace fsdpgen {

namespace {

// adamw(lr = 0.0003, betas = (0.9, 0.95), eps = 1e-08, weight_decay = 0.1)
std::string adamw_call(const AdamWSpec& a) {
  return fmt::format("adamw(lr = {}, betas = ({}, {}), eps = {}, weight_decay = {})",
                     format_real(a.lr), format_real(a.beta1), format_real(a.beta2),
                     format_real(a.eps), format_real(a.weight_decay));
}

std::string optimizer_text(const TrainSpec& t) {
  const OptimizerSpec& o = t.optimizer;
  if (o.kind == OptimizerKind::AdamW)
    return fmt::format("optimizer = {}",
                       adamw_call({o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}));
  if (o.kind == OptimizerKind::Sgd)
    return fmt::format("optimizer = sgd(lr = {}, momentum = {}, weight_decay = {})",
                       format_real(o.lr), format_real(o.momentum), format_real(o.weight_decay));
  return fmt::format(
      "optimizer = muon(lr = {}, momentum = {}, nesterov = {}, ns_steps = {}, ns_dtype = {}, "
      "weight_decay = {}, adjust_lr = {},\n                   adamw = {})",
      format_real(o.lr), format_real(o.momentum), o.nesterov, o.ns_steps, to_string(o.ns_dtype),
      format_real(o.weight_decay), to_string(o.adjust_lr), adamw_call(o.adamw));
}

std::string lr_schedule_text(const TrainSpec& t) {
  const LrScheduleSpec& l = t.lr_schedule;
  if (l.kind == LrScheduleKind::Constant)
    return fmt::format("lr_schedule = constant(warmup = {})", l.warmup);
  if (l.min_ratio)
    return fmt::format("lr_schedule = {}(warmup = {}, min_ratio = {})", to_string(l.kind), l.warmup,
                       format_real(*l.min_ratio));
  return fmt::format("lr_schedule = {}(warmup = {}, min = {})", to_string(l.kind), l.warmup,
                     format_real(l.min_lr));
}

// synthetic(seed = 7), text("input.txt"), text("notes.txt", allow_bytes = true),
// tokens("a_*.bin", "b.bin")
std::string data_source(const DataSpec& d) {
  if (d.kind == DataKind::Synthetic) return fmt::format("synthetic(seed = {})", d.seed);
  std::string paths;
  for (const std::string& p : d.paths)
    paths += (paths.empty() ? "" : ", ") + quote(p);
  if (d.allow_bytes) paths += ", allow_bytes = true";
  return fmt::format("{}({})", to_string(d.kind), paths);
}

std::string loss_scale_text(const PrecisionSpec& pr) {
  const LossScaleSpec& ls = pr.loss_scale;
  return ls.kind == LossScaleKind::Static
             ? fmt::format("loss_scale = static({})", ls.init)
             : fmt::format("loss_scale = dynamic(init = {}, interval = {})", ls.init, ls.interval);
}

std::string rope_scaling_text(const ModelSpec& m) {
  const RopeScalingSpec& r = m.rope_scaling;
  if (r.linear) return fmt::format("rope_scaling = linear(factor = {})", format_real(r.factor));
  return fmt::format(
      "rope_scaling = llama3(factor = {}, low_freq = {}, high_freq = {}, original_context = {})",
      format_real(r.factor), format_real(r.low_freq), format_real(r.high_freq), r.original_context);
}

// qk_norm's values: none, each head's (Qwen3), across all heads (OLMo 2).
constexpr std::array<std::string_view, 3> kQkNormNames = {"false", "true", "across_heads"};

bool is_llama(const ModelSpec& m) {
  return m.family == Family::Llama;
}

const KeyTable<PrecisionSpec>& precision_keys() {
  static const KeyTable<PrecisionSpec> t = {
      dtype_key("param", &PrecisionSpec::param),
      dtype_key("reduce", &PrecisionSpec::reduce),
      dtype_key("master", &PrecisionSpec::master),
      // The loss scale is printed where it matters (fp16) or was changed.
      custom_key<PrecisionSpec>(
          "loss_scale",
          [](FieldReader& r, const ast::Entry& e, PrecisionSpec& p) {
            if (auto* v = r.value_of(e)) r.read_loss_scale(*v, p.loss_scale);
          },
          loss_scale_text)
          .when([](const PrecisionSpec& p) {
            return p.param == DType::FP16 || p.reduce == DType::FP16 ||
                   p.loss_scale != LossScaleSpec{};
          }),
  };
  return t;
}

const KeyTable<PrefetchSpec>& prefetch_keys() {
  static const KeyTable<PrefetchSpec> t = {
      bool_key("forward", &PrefetchSpec::forward),
      enum_key("backward", &PrefetchSpec::backward, "backward prefetch mode",
               kBackwardPrefetchNames),
      int_key("max_inflight", &PrefetchSpec::max_inflight, 1, kMaxLayers + 1),
  };
  return t;
}

const KeyTable<AccumulateSpec>& accumulate_keys() {
  static const KeyTable<AccumulateSpec> t = {
      int_key("micro_batches", &AccumulateSpec::micro_batches, 1, 65536),
      enum_key("reduce", &AccumulateSpec::reduce, "accumulation reduce mode",
               kAccumulateReduceNames),
  };
  return t;
}

}  // namespace

// The most a softcap or query_pre_attn_scalar may be (Gemma 2's are 30 to 256):
// a bound that keeps them finite.
constexpr double kMaxSoftcap = 1e9;

// kv_heads, ffn_hidden, tie_embeddings and rope_theta default from other keys
// (fill_model_defaults).
const KeyTable<ModelSpec>& model_keys() {
  static const KeyTable<ModelSpec> t = {
      enum_key("family", &ModelSpec::family, "model family", kFamilyNames),
      int_key("vocab", &ModelSpec::vocab, 1, kMaxVocab),
      int_key("context", &ModelSpec::context, 1, kMaxContext),
      int_key("width", &ModelSpec::width, 1, kMaxWidth),
      int_key("heads", &ModelSpec::heads, 1, kMaxWidth),
      int_key("kv_heads", &ModelSpec::kv_heads, 1, kMaxWidth).when(is_llama),
      int_key("layers", &ModelSpec::layers, 1, kMaxLayers),
      int_key("ffn_hidden", &ModelSpec::ffn_hidden, 1, kMaxFfn),
      bool_key("tie_embeddings", &ModelSpec::tie_embeddings),
      int_key("pad_vocab_to", &ModelSpec::pad_vocab_to, 1, kMaxPadVocabTo),
      real_key("norm_eps", &ModelSpec::norm_eps, 0, 0.5, false),
      real_key("rope_theta", &ModelSpec::rope_theta, 0, 1e12, false).when(is_llama),
      custom_key<ModelSpec>(
          "rope_scaling",
          [](FieldReader& r, const ast::Entry& e, ModelSpec& m) {
            if (const ast::Value* v = r.value_of(e))
              if (auto x = r.read_rope_scaling(*v)) m.rope_scaling = *x;
          },
          rope_scaling_text)
          .when([](const ModelSpec& m) { return is_llama(m) && m.rope_scaling.enabled; }),
      bool_key("qkv_bias", &ModelSpec::qkv_bias).when([](const ModelSpec& m) {
        return is_llama(m) && m.qkv_bias;
      }),
      custom_key<ModelSpec>(
          "qk_norm",
          [](FieldReader& r, const ast::Entry& e, ModelSpec& m) {
            if (const ast::Value* v = r.value_of(e))
              if (auto i = r.vals.as_enum<int>(*v, "qk_norm value", kQkNormNames)) {
                m.qk_norm = *i != 0;
                m.qk_norm_across_heads = *i == 2;
              }
          },
          [](const ModelSpec& m) {
            return fmt::format("qk_norm = {}", kQkNormNames[m.qk_norm_across_heads ? 2 : 1]);
          })
          .when([](const ModelSpec& m) { return is_llama(m) && m.qk_norm; }),
      enum_key("block_norms", &ModelSpec::block_norms, "block_norms value", kBlockNormsNames)
          .when([](const ModelSpec& m) { return is_llama(m) && m.block_norms != BlockNorms::Pre; }),
      int_key("head_dim", &ModelSpec::head_size, 2, kMaxWidth).when([](const ModelSpec& m) {
        return is_llama(m) && m.head_size != 0;
      }),
      int_key("sliding_window", &ModelSpec::sliding_window, 1, kMaxContext)
          .when([](const ModelSpec& m) { return is_llama(m) && m.sliding_window != 0; }),
      int_key("global_every", &ModelSpec::global_every, 1, kMaxLayers).when([](const ModelSpec& m) {
        return is_llama(m) && m.global_every != 0;
      }),
      real_key("rope_local_theta", &ModelSpec::rope_local_theta, 0, 1e12, false)
          .when([](const ModelSpec& m) { return is_llama(m) && m.rope_local_theta != 0; }),
      bool_key("scale_embedding", &ModelSpec::scale_embedding).when([](const ModelSpec& m) {
        return is_llama(m) && m.scale_embedding;
      }),
      bool_key("norm_plus_one", &ModelSpec::norm_plus_one).when([](const ModelSpec& m) {
        return is_llama(m) && m.norm_plus_one;
      }),
      enum_key("activation", &ModelSpec::activation, "MLP activation", kActivationNames)
          .when([](const ModelSpec& m) { return is_llama(m) && m.activation != Activation::Silu; }),
      real_key("attention_softcap", &ModelSpec::attention_softcap, 0, kMaxSoftcap, false)
          .when([](const ModelSpec& m) { return is_llama(m) && m.attention_softcap != 0; }),
      real_key("logit_softcap", &ModelSpec::logit_softcap, 0, kMaxSoftcap, false)
          .when([](const ModelSpec& m) { return is_llama(m) && m.logit_softcap != 0; }),
      real_key("query_pre_attn_scalar", &ModelSpec::query_pre_attn_scalar, 0, kMaxSoftcap, false)
          .when([](const ModelSpec& m) { return is_llama(m) && m.query_pre_attn_scalar != 0; }),
  };
  return t;
}

const KeyTable<ParallelSpec>& parallel_keys() {
  static const KeyTable<ParallelSpec> t = {
      int_key("world", &ParallelSpec::world, 1, kMaxWorld),
      enum_key("sharding", &ParallelSpec::sharding, "sharding strategy", kShardingNames),
      int_key("shard_group", &ParallelSpec::shard_group, 1, kMaxWorld)
          .when([](const ParallelSpec& p) { return is_hybrid(p.sharding); }),
      int_key("ranks_per_node", &ParallelSpec::ranks_per_node, 1, kMaxWorld),
      int_key("shard_align", &ParallelSpec::shard_align_bytes, 4, 65536),
      block_key("precision", &ParallelSpec::precision, precision_keys,
                "param = bf16  reduce = fp32  master = fp32"),
      block_key("prefetch", &ParallelSpec::prefetch, prefetch_keys,
                "forward = true  backward = pre  max_inflight = 2"),
      enum_key("recompute", &ParallelSpec::recompute, "recompute mode", kRecomputeNames),
      custom_key<ParallelSpec>(
          "offload",
          [](FieldReader& r, const ast::Entry& e, ParallelSpec& p) { r.read_offload(e, p); },
          [](const ParallelSpec& p) {
            if (!p.offload_activations) return fmt::format("offload = {}", to_string(p.offload));
            return fmt::format(
                "offload {{ {} }}",
                fmt::join(print_keys(offload_keys(), {p.offload, Offload::Cpu}), "  "));
          }),
      block_key("accumulate", &ParallelSpec::accumulate, accumulate_keys,
                "micro_batches = 4  reduce = every"),
  };
  return t;
}

const KeyTable<TrainSpec>& train_keys() {
  auto has_val = [](const TrainSpec& t) { return t.val.has_value(); };
  auto has_eval = [](const TrainSpec& t) { return !t.eval.empty(); };
  auto has_samples = [](const TrainSpec& t) { return t.sample_every > 0; };
  static const KeyTable<TrainSpec> t = {
      custom_key<TrainSpec>(
          "optimizer",
          [](FieldReader& r, const ast::Entry& e, TrainSpec&) {
            if (auto* v = r.value_of(e)) r.read_optimizer(*v);
          },
          optimizer_text),
      custom_key<TrainSpec>(
          "lr_schedule",
          [](FieldReader& r, const ast::Entry& e, TrainSpec&) {
            if (auto* v = r.value_of(e)) r.read_lr_schedule(*v);
          },
          lr_schedule_text),
      int_key("micro_batch", &TrainSpec::micro_batch, 1, kMaxMicroBatch),
      int_key("steps", &TrainSpec::steps, 1, kMaxCount),
      custom_key<TrainSpec>(
          "clip",
          [](FieldReader& r, const ast::Entry& e, TrainSpec& t) {
            const ast::Value* v = r.value_of(e);
            if (!v) return;
            if (v->kind == ast::Value::Kind::Ident && v->text == "none")
              t.clip = 0;
            else if (auto c = r.vals.as_float(*v, "clip", 0, 1e30, true))
              t.clip = *c;
          },
          [](const TrainSpec& t) {
            return t.clip > 0 ? fmt::format("clip = {}", format_real(t.clip))
                              : std::string("clip = none");
          }),
      int_key("seed", &TrainSpec::seed, 0, kMaxCount),
      custom_key<TrainSpec>(
          "data",
          [](FieldReader& r, const ast::Entry& e, TrainSpec& t) {
            if (auto* v = r.value_of(e)) r.read_data(*v, t.data, "data");
          },
          [](const TrainSpec& t) { return fmt::format("data = {}", data_source(t.data)); }),
      bool_key("shuffle", &TrainSpec::shuffle),
      custom_key<TrainSpec>(
          "val",
          [](FieldReader& r, const ast::Entry& e, TrainSpec& t) {
            const ast::Value* v = r.value_of(e);
            if (!v) return;
            if (v->kind == ast::Value::Kind::Ident && v->text == "none") {
              t.val.reset();
              return;
            }
            t.val.emplace();
            r.read_data(*v, *t.val, "val");
          },
          [](const TrainSpec& t) {
            return t.val ? fmt::format("val = {}", data_source(*t.val)) : std::string("val = none");
          }),
      int_key("val_every", &TrainSpec::val_every, 0, kMaxCount).when(has_val),
      int_key("val_sequences", &TrainSpec::val_sequences, 1, kMaxCount).when(has_val),
      custom_key<TrainSpec>(
          "eval",
          [](FieldReader& r, const ast::Entry& e, TrainSpec& t) {
            const ast::Value* v = r.value_of(e);
            if (!v) return;
            if (v->kind == ast::Value::Kind::Ident && v->text == "none")
              t.eval.clear();
            else if (auto path = r.vals.as_string(*v, "eval"))
              t.eval = *path;
          },
          [](const TrainSpec& t) { return fmt::format("eval = {}", quote(t.eval)); })
          .when(has_eval),
      int_key("eval_every", &TrainSpec::eval_every, 0, kMaxCount).when(has_eval),
      int_key("eval_examples", &TrainSpec::eval_examples, 0, kMaxCount).when(has_eval),
      int_key("sample_every", &TrainSpec::sample_every, 0, kMaxCount).when(has_samples),
      int_key("sample_tokens", &TrainSpec::sample_tokens, 1, kMaxCount).when(has_samples),
      custom_key<TrainSpec>(
          "checkpoint",
          [](FieldReader& r, const ast::Entry& e, TrainSpec&) { r.read_checkpoint(e); },
          [](const TrainSpec& t) {
            const CheckpointSpec& c = t.checkpoint;
            return c.enabled ? fmt::format("checkpoint(every = {}, dir = {}, keep = {})", c.every,
                                           quote(c.dir), c.keep)
                             : std::string("checkpoint = none");
          }),
      int_key("log_every", &TrainSpec::log_every, 1, kMaxCount),
      real_key("stall_timeout", &TrainSpec::stall_timeout, 0, kMaxStallTimeoutSeconds, false)
          .when([](const TrainSpec& t) { return t.stall_timeout != kDefaultStallTimeoutSeconds; }),
      custom_key<TrainSpec>(
          "guard", [](FieldReader& r, const ast::Entry& e, TrainSpec&) { r.read_guard(e); },
          [](const TrainSpec& t) {
            return fmt::format("guard {{ {} }}",
                               fmt::join(print_keys(guard_keys(), t.guard), "  "));
          })
          .when([](const TrainSpec& t) { return t.guard != GuardSpec{}; }),
  };
  return t;
}

const KeyTable<OffloadBlock>& offload_keys() {
  static const KeyTable<OffloadBlock> t = {
      enum_key("params", &OffloadBlock::params, "offload mode", kOffloadNames),
      enum_key("activations", &OffloadBlock::activations, "offload mode", kOffloadNames),
  };
  return t;
}

const KeyTable<GuardSpec>& guard_keys() {
  static const KeyTable<GuardSpec> t = {
      real_key("loss_z", &GuardSpec::loss_z, 0, kMaxGuardZ, true),
      real_key("norm_z", &GuardSpec::norm_z, 0, kMaxGuardZ, true),
      int_key("window", &GuardSpec::window, 2, kMaxGuardWindow),
      int_key("max_skips", &GuardSpec::max_skips, 1, kMaxCount),
  };
  return t;
}

}  // namespace fsdpgen
