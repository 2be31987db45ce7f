// Rules: each rule between keys is one function; kRules lists them in the
// order they report. A rule skips itself when a key it relates was rejected
// (Keys::usable): that value was reported already and a default stands in it.
#include "dsl/Rules.h"

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "dsl/Values.h"
#include "runtime/limits.h"

namespace fsdpgen {
namespace {

// A rule between the spec's `key` and `other` is reported at `key`, or at
// `other`'s flag when the command line replaced it, with `key_note` at `key`.
Diagnostic& error_between(const CheckContext& c, const std::string& key, const std::string& other,
                          std::string message, std::string key_note) {
  const Keys& k = c.keys;
  if (!k.from_command_line(other)) return c.diags.error(k.where(key), std::move(message));
  Diagnostic& e = c.diags.error(k.where(other), std::move(message));
  Diagnostics::note(e, k.entry(key), std::move(key_note));
  return e;
}

// ---- model ----

// Unless llama's head_dim gives the head size apart from them.
void heads_divide_width(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.width", "model.heads"}) || m.width % m.heads == 0 ||
      (m.family == Family::Llama && c.keys.has("model.head_dim")))
    return;
  Diagnostic& e = c.diags.error(c.keys.where("model.heads"),
                                fmt::format("heads ({}) must divide width ({})", m.heads, m.width));
  Diagnostics::note(e, fmt::format("width / heads = {} / {} leaves a remainder of {}", m.width,
                                   m.heads, m.width % m.heads));
}

// Rotary positions pair each head's first half with its second (runtime/rope.h).
void llama_head_size_even(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.family", "model.width", "model.heads", "model.head_dim"}) ||
      m.family != Family::Llama)
    return;
  if (c.keys.has("model.head_dim")) {
    if (m.head_size % 2 == 0) return;
    Diagnostic& e = c.diags.error(c.keys.where("model.head_dim"),
                                  fmt::format("llama's head_dim ({}) must be even", m.head_size));
    Diagnostics::note(e, "rotary positions turn each head's pairs (x[i], x[i + head_size / 2])");
    return;
  }
  if (m.width % m.heads != 0 || (m.width / m.heads) % 2 == 0) return;
  Diagnostic& e =
      c.diags.error(c.keys.where("model.heads"),
                    fmt::format("llama's head size width / heads = {} / {} = {} must be even",
                                m.width, m.heads, m.width / m.heads));
  Diagnostics::note(e, "rotary positions turn each head's pairs (x[i], x[i + head_size / 2])");
}

bool kv_heads_known(const CheckContext& c) {
  return c.keys.usable({"model.family"}) && c.keys.usable({"model.heads", "model.kv_heads"});
}

void kv_heads_only_for_llama(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  const Keys& k = c.keys;
  if (!kv_heads_known(c) || !k.has("model.kv_heads") || m.family == Family::Llama ||
      m.kv_heads == m.heads)
    return;
  Diagnostic& e = c.diags.error(k.where("model.kv_heads"),
                                "kv_heads (grouped-query attention) applies only to family llama");
  if (k.has("model.family"))
    Diagnostics::note(e, k.where("model.family"),
                      "family is 'gpt2' here; gpt2 uses kv_heads = heads");
  else
    Diagnostics::note(e, "family is 'gpt2' by default; gpt2 uses kv_heads = heads");
}

// gpt2's kv_heads equals heads (or is reported by kv_heads_only_for_llama).
void kv_heads_divide_heads(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!kv_heads_known(c) || m.family != Family::Llama || m.heads % m.kv_heads == 0) return;
  c.diags.error(c.keys.where("model.kv_heads"),
                fmt::format("kv_heads ({}) must divide heads ({})", m.kv_heads, m.heads));
}

// A llama-only key given to gpt2: an error at the key, with a note saying
// what gpt2 has instead.
void only_for_llama(const CheckContext& c, const std::string& key, std::string_view gpt2_has) {
  const Keys& k = c.keys;
  if (!k.usable({"model.family"}) || !k.has(key) || c.spec.model.family == Family::Llama) return;
  Diagnostic& e = c.diags.error(
      k.where(key), fmt::format("{} applies only to family llama", key.substr(key.find('.') + 1)));
  Diagnostics::note(e, k.has("model.family")
                           ? fmt::format("gpt2 {}", gpt2_has)
                           : fmt::format("family is 'gpt2' by default; gpt2 {}", gpt2_has));
}

void rope_theta_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.rope_theta", "uses learned position embeddings");
}

void rope_scaling_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.rope_scaling", "uses learned position embeddings");
}

void qkv_bias_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.qkv_bias", "has biases on q, k, v and every other linear layer");
}

void qk_norm_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.qk_norm", "has no norm on q and k");
}

void head_dim_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.head_dim", "has head size width / heads");
}

void sliding_window_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.sliding_window", "attends every earlier position");
}

void global_every_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.global_every", "attends every earlier position in every layer");
}

void rope_local_theta_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.rope_local_theta", "uses learned position embeddings");
}

void scale_embedding_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.scale_embedding", "adds learned positions to unscaled embeddings");
}

void norm_plus_one_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.norm_plus_one", "uses LayerNorm");
}

void activation_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.activation", "has a GELU MLP without a gate");
}

void attention_softcap_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.attention_softcap", "takes the softmax of the scores as they are");
}

void logit_softcap_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.logit_softcap", "takes the cross-entropy of the logits as they are");
}

void query_pre_attn_scalar_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.query_pre_attn_scalar", "scales q . k by 1 / sqrt(head size)");
}

// Gemma's pieces as transformers' Gemma classes have them, so that --save
// can write the model: the embedding scale and (1 + weight) norms together
// (GemmaForCausalLM; no class has one alone), with norms before each
// sub-block (Gemma 1) or before and after each (block_norms = sandwich:
// Gemma2ForCausalLM, and Gemma3ForCausalLM with each head's q/k norms),
// windows only with the latter; never Qwen2's biases or OLMo 2's norms.
// Sandwich norms and alternating layers come with Gemma's pieces only.
void gemma_pieces_together(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.family", "model.scale_embedding", "model.norm_plus_one",
                      "model.qkv_bias", "model.qk_norm", "model.sliding_window",
                      "model.block_norms", "model.global_every", "model.rope_local_theta"}) ||
      m.family != Family::Llama)
    return;
  const bool gemma = m.scale_embedding || m.norm_plus_one;
  struct piece {
    const char* key;
    bool set;
    const char* why;
  };
  if (!gemma) {
    const piece gemma_only[] = {
        {"model.block_norms", m.sandwich_norm(), "norms before and after each sub-block"},
        {"model.global_every", m.global_every != 0, "alternating windowed and global layers"},
        {"model.rope_local_theta", m.rope_local_theta != 0,
         "a rotary base of the windowed layers"}};
    for (const piece& o : gemma_only) {
      if (!o.set) continue;
      Diagnostic& e = c.diags.error(
          c.keys.where(o.key),
          fmt::format("{} without Gemma's pieces (scale_embedding, norm_plus_one) is not supported",
                      o.key == std::string_view("model.block_norms")
                          ? std::string("block_norms = sandwich")
                          : std::string(std::string_view(o.key).substr(6))));
      Diagnostics::note(e, fmt::format("only Gemma 2 and 3 have {}; transformers has no class "
                                       "with them alone, so --save could not write the model",
                                       o.why));
    }
    return;
  }
  const char* set = m.scale_embedding ? "model.scale_embedding" : "model.norm_plus_one";
  if (m.scale_embedding != m.norm_plus_one) {
    Diagnostic& e = c.diags.error(
        c.keys.where(set), fmt::format("{} = true without {} is not supported",
                                       m.scale_embedding ? "scale_embedding" : "norm_plus_one",
                                       m.scale_embedding ? "norm_plus_one" : "scale_embedding"));
    Diagnostics::note(e,
                      "both are Gemma's (GemmaForCausalLM); transformers has no class with one "
                      "alone, so --save could not write the model");
    return;
  }
  const bool pre = m.block_norms == BlockNorms::Pre;
  const piece others[] = {
      {"model.qkv_bias", m.qkv_bias, "no Gemma has biases on q, k and v"},
      {"model.qk_norm", m.qk_norm && m.qk_norm_across_heads,
       "Gemma 3's q and k norms are each head's (qk_norm = true)"},
      {"model.block_norms", m.post_norm(),
       "Gemma 1's norms come before each sub-block (pre), Gemma 2's and 3's before and after "
       "(sandwich)"},
      {"model.qk_norm", pre && m.qk_norm && !m.qk_norm_across_heads,
       "Gemma 1 has none; Gemma 3's q/k norms come with block_norms = sandwich"},
      {"model.sliding_window", pre && m.attention_window() != 0,
       "Gemma 1 has none; Gemma 2's and 3's windows come with block_norms = sandwich"}};
  for (const piece& o : others) {
    if (!o.set) continue;
    Diagnostic& e = c.diags.error(
        c.keys.where(o.key),
        fmt::format("{} with Gemma's pieces (scale_embedding, norm_plus_one) is not supported",
                    o.key == std::string_view("model.block_norms")
                        ? std::string("block_norms = post")
                        : std::string(std::string_view(o.key).substr(6))));
    Diagnostics::note(e, o.why);
  }
}

// Gemma 2's and 3's alternating layers: global_every says which layers are
// local, sliding_window what they attend; a rotary base of their own is
// Gemma 3's (with q/k norms; Gemma 2 has one base). Without Gemma's pieces
// gemma_pieces_together refuses these keys.
void alternating_layers_complete(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.family", "model.sliding_window", "model.global_every",
                      "model.rope_local_theta", "model.qk_norm", "model.scale_embedding",
                      "model.norm_plus_one"}) ||
      m.family != Family::Llama || !(m.scale_embedding || m.norm_plus_one))
    return;
  if (m.global_every != 0 && m.sliding_window == 0) {
    Diagnostic& e = c.diags.error(c.keys.where("model.global_every"),
                                  "global_every without sliding_window is not supported");
    Diagnostics::note(e, fmt::format("one layer in every {} is global and the others attend the "
                                     "last sliding_window positions: give the window",
                                     m.global_every));
  }
  if (m.rope_local_theta == 0) return;
  if (m.global_every == 0) {
    Diagnostic& e = c.diags.error(c.keys.where("model.rope_local_theta"),
                                  "rope_local_theta without global_every is not supported");
    Diagnostics::note(e,
                      "it is the local layers' rotary base beside the global layers' "
                      "rope_theta; global_every says which layers are global");
  } else if (!m.qk_norm) {
    Diagnostic& e = c.diags.error(c.keys.where("model.rope_local_theta"),
                                  "rope_local_theta without qk_norm is not supported");
    Diagnostics::note(e,
                      "a local rotary base is Gemma 3's, which has qk_norm = true; Gemma 2 "
                      "has one base (Gemma2ForCausalLM could not load the model)");
  }
}

// Qwen3 has qk_norm without biases, Qwen2 the biases without qk_norm; the
// llama tables (runtime/model/llama.h) have one or the other.
void qk_norm_without_qkv_bias(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.family", "model.qk_norm", "model.qkv_bias"}) ||
      m.family != Family::Llama || !m.qk_norm || !m.qkv_bias)
    return;
  Diagnostic& e = c.diags.error(c.keys.where("model.qk_norm"),
                                fmt::format("qk_norm = {} with qkv_bias = true is not supported",
                                            m.qk_norm_across_heads ? "across_heads" : "true"));
  Diagnostics::note(e, "Qwen3 has qk_norm without biases, Qwen2 the biases without qk_norm");
}

void block_norms_only_for_llama(const CheckContext& c) {
  only_for_llama(c, "model.block_norms", "has its norms before each sub-block");
}

// OLMo 2's post-norm block has qk_norm = across_heads; runtime/model/llama.h
// has post-norm tables with qk_norm only.
void post_norms_with_qk_norm(const CheckContext& c) {
  const ModelSpec& m = c.spec.model;
  if (!c.keys.usable({"model.family", "model.qk_norm", "model.block_norms"}) ||
      m.family != Family::Llama || !m.post_norm() || m.qk_norm)
    return;
  Diagnostic& e = c.diags.error(c.keys.where("model.block_norms"),
                                "block_norms = post without qk_norm is not supported");
  Diagnostics::note(e, "OLMo 2's post-norm block has qk_norm = across_heads");
}

// ---- parallel ----

void ranks_per_node_divides_world(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  const Keys& k = c.keys;
  if (!k.usable({"parallel.world", "parallel.ranks_per_node"}) || p.world % p.ranks_per_node == 0)
    return;
  if (k.has("parallel.ranks_per_node")) {
    Diagnostic& e = error_between(
        c, "parallel.ranks_per_node", "parallel.world",
        fmt::format("ranks_per_node ({}) must divide world ({})", p.ranks_per_node, p.world),
        fmt::format("ranks_per_node is {} here", p.ranks_per_node));
    Diagnostics::note(e, "every node runs the same number of ranks");
    return;
  }
  Diagnostic& e =
      c.diags.error(k.where("parallel.world"),
                    fmt::format("world ({}) is not a multiple of the default ranks_per_node ({})",
                                p.world, p.ranks_per_node));
  Diagnostics::note(e,
                    "set 'ranks_per_node' to the number of ranks on each node; every node runs "
                    "the same number");
}

void shard_align_is_a_power_of_two(const CheckContext& c) {
  const int64_t align_bytes = c.spec.parallel.shard_align_bytes;
  if ((align_bytes & (align_bytes - 1)) == 0) return;
  c.diags.error(c.keys.where("parallel.shard_align"),
                fmt::format("'shard_align' must be a power of two (bytes), got {}", align_bytes));
}

bool hybrid(const CheckContext& c) {
  return c.keys.usable({"parallel.sharding"}) && is_hybrid(c.spec.parallel.sharding);
}

bool group_sizes_known(const CheckContext& c) {
  return c.keys.usable({"parallel.world", "parallel.ranks_per_node", "parallel.shard_group"});
}

void shard_group_divides_world(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  const Keys& k = c.keys;
  if (!hybrid(c) || !k.has("parallel.shard_group") || !group_sizes_known(c) ||
      p.world % p.shard_group == 0)
    return;
  Diagnostic& e =
      error_between(c, "parallel.shard_group", "parallel.world",
                    fmt::format("shard_group ({}) must divide world ({})", p.shard_group, p.world),
                    fmt::format("shard_group is {} here", p.shard_group));
  if (!k.has("parallel.world"))
    Diagnostics::note(e, fmt::format("world is {} by default", p.world));
  else if (!k.from_command_line("parallel.world"))
    Diagnostics::note(e, k.where("parallel.world"), fmt::format("world is {} here", p.world));
}

// A warning: hybrid sharding over one group, or over groups of one rank.
void hybrid_shards_and_replicates(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  if (!hybrid(c) || !group_sizes_known(c) || p.world % p.shard_group != 0 ||
      (p.shard_group != p.world && p.shard_group != 1))
    return;
  Diagnostic& w = c.diags.warning(
      c.keys.where("parallel.sharding"),
      fmt::format("{} with shard_group {} of world {} {}", to_string(p.sharding), p.shard_group,
                  p.world, p.shard_group == 1 ? "shards nothing" : "has a single replica"));
  Diagnostics::note(
      w, p.shard_group == 1
             ? "this behaves as 'no_shard'"
             : fmt::format("this behaves as '{}'",
                           p.sharding == Sharding::HybridShard ? "full_shard" : "shard_grad_op"));
}

void shard_group_only_for_hybrid(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  const Keys& k = c.keys;
  if (!k.usable({"parallel.sharding"}) || is_hybrid(p.sharding) || !k.has("parallel.shard_group"))
    return;
  Diagnostic& e = c.diags.error(k.where("parallel.shard_group"),
                                "'shard_group' applies only to hybrid sharding");
  std::string hint = "use 'hybrid_shard' or 'hybrid_shard_zero2'";
  if (k.has("parallel.sharding"))
    Diagnostics::note(e, k.where("parallel.sharding"),
                      fmt::format("sharding is '{}' here; {}", to_string(p.sharding), hint));
  else
    Diagnostics::note(e,
                      fmt::format("sharding is '{}' by default; {}", to_string(p.sharding), hint));
}

void offload_needs_sharding(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  if (p.offload != Offload::Cpu || p.sharding != Sharding::NoShard) return;
  Diagnostic& e =
      c.diags.error(c.keys.where("parallel.offload"), "'offload = cpu' needs a sharded strategy");
  Diagnostics::note(e, c.keys.where("parallel.sharding"), "sharding is 'no_shard' here");
}

// Only recompute = block keeps checkpointed activations (each block's input).
void activation_offload_needs_recompute(const CheckContext& c) {
  const ParallelSpec& p = c.spec.parallel;
  if (!p.offload_activations || p.recompute == Recompute::Block ||
      !c.keys.usable({"parallel.recompute"}))
    return;
  Diagnostic& e = c.diags.error(
      c.keys.where("parallel.offload.activations"),
      "'activations = cpu' offloads the checkpointed activations, which only recompute = block "
      "keeps");
  if (c.keys.has("parallel.recompute"))
    Diagnostics::note(e, c.keys.where("parallel.recompute"), "recompute is 'none' here");
  else
    Diagnostics::note(e, "recompute is 'none' by default; add 'recompute = block'");
}

void prefetch_needs_two_in_flight(const CheckContext& c) {
  const PrefetchSpec& f = c.spec.parallel.prefetch;
  bool prefetching = f.forward || f.backward != BackwardPrefetch::None;
  if (!c.keys.usable({"parallel.prefetch.forward", "parallel.prefetch.backward"}) || !prefetching ||
      f.max_inflight >= 2)
    return;
  Diagnostic& e = c.diags.error(c.keys.where("parallel.prefetch.max_inflight"),
                                "prefetch needs max_inflight of at least 2");
  Diagnostics::note(e,
                    "a prefetched unit is gathered while the current one is still in use; set "
                    "'forward = false' and 'backward = none' to gather one unit at a time");
}

// A warning: a loss scale given where no dtype is fp16.
void loss_scale_needs_fp16(const CheckContext& c) {
  const PrecisionSpec& pr = c.spec.parallel.precision;
  const Keys& k = c.keys;
  if (!k.has("parallel.precision.loss_scale") || pr.param == DType::FP16 ||
      pr.reduce == DType::FP16 ||
      !k.usable({"parallel.precision.param", "parallel.precision.reduce"}))
    return;
  Diagnostic& w = c.diags.warning(k.where("parallel.precision.loss_scale"),
                                  "loss_scale has no effect without fp16");
  Diagnostics::note(w,
                    "only fp16 param or reduce dtypes scale the loss; bf16 and fp32 have the "
                    "range to do without");
}

void master_is_not_fp16(const CheckContext& c) {
  if (c.spec.parallel.precision.master != DType::FP16) return;
  Diagnostic& e = c.diags.error(c.keys.where("parallel.precision.master"),
                                "fp16 master weights are not supported");
  Diagnostics::note(e,
                    "use 'master = fp32' (or bf16); fp16 cannot hold small updates to the weights");
}

// fp16 masters are reported by master_is_not_fp16.
void master_as_wide_as_param(const CheckContext& c) {
  const PrecisionSpec& pr = c.spec.parallel.precision;
  if (pr.master == DType::FP16 || !c.keys.usable({"parallel.precision.param"}) ||
      dtype_bytes(pr.master) >= dtype_bytes(pr.param))
    return;
  Diagnostic& e = c.diags.error(c.keys.where("parallel.precision.master"),
                                fmt::format("master dtype '{}' is narrower than param dtype '{}'",
                                            to_string(pr.master), to_string(pr.param)));
  Diagnostics::note(
      e, "master weights must hold at least the precision of the parameters they produce");
}

// ---- train ----

void note_steps(const CheckContext& c, Diagnostic& d) {
  if (c.keys.has("train.steps"))
    Diagnostics::note(d, c.keys.where("train.steps"), "steps is set here");
  else
    Diagnostics::note(d, fmt::format("steps is {} by default", c.spec.train.steps));
}

void warmup_within_the_run(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  const Keys& k = c.keys;
  if (!k.usable({"train.lr_schedule", "train.steps"}) || t.lr_schedule.warmup <= t.steps) return;
  Diagnostic& e = c.diags.error(k.where("train.warmup", k.where("train.lr_schedule")),
                                fmt::format("warmup ({} steps) is longer than the run ({} steps)",
                                            t.lr_schedule.warmup, t.steps));
  note_steps(c, e);
}

void min_lr_below_lr(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  const Keys& k = c.keys;
  if (!k.usable({"train.lr_schedule", "train.optimizer"}) || t.lr_schedule.min_lr <= t.optimizer.lr)
    return;
  Diagnostic& e = c.diags.error(k.where("train.min_lr", k.where("train.lr_schedule")),
                                fmt::format("min learning rate {} exceeds the optimizer's lr {}",
                                            t.lr_schedule.min_lr, t.optimizer.lr));
  if (k.has("train.lr"))
    Diagnostics::note(e, k.where("train.lr"), "lr is set here");
  else
    Diagnostics::note(e, fmt::format("the optimizer's lr is {} by default", t.optimizer.lr));
}

// A learning rate for a message: three significant digits.
std::string lr_text(double lr) {
  return fmt::format("{:.3g}", lr);
}

// Muon's two parameter groups, each from its peak lr to the floor the
// schedule takes it to (the nested AdamW's lr keeps its ratio to Muon's).
std::string muon_groups(const TrainSpec& t) {
  const OptimizerSpec& o = t.optimizer;
  if (t.lr_schedule.kind == LrScheduleKind::Constant)
    return fmt::format("Muon's matrices train at lr {} and the other parameters at {}, constant",
                       lr_text(o.lr), lr_text(o.adamw.lr));
  const double ratio = t.lr_schedule.min_lr / o.lr;
  return fmt::format(
      "Muon's matrices train at lr {} down to {}, the other parameters at {} down to {} ({} of "
      "each peak)",
      lr_text(o.lr), lr_text(t.lr_schedule.min_lr), lr_text(o.adamw.lr),
      lr_text(ratio * o.adamw.lr), lr_text(ratio));
}

// Under Muon, the spec gives the schedule an absolute floor above 0.
bool muon_floor_absolute(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  return t.optimizer.kind == OptimizerKind::Muon && c.keys.has("train.min_lr") &&
         t.lr_schedule.min_lr > 0 && t.lr_schedule.min_lr <= t.optimizer.lr &&
         c.keys.usable({"train.lr_schedule", "train.optimizer"});
}

// A warning: `min` is an absolute lr, and under Muon it is the floor of
// Muon's lr (0.02 by default): an AdamW-sized floor (1e-4) is a 200x decay,
// and the nested AdamW's lr decays as much. min_ratio says what is meant.
void muon_floor_is_absolute(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  const Keys& k = c.keys;
  if (!muon_floor_absolute(c)) return;
  const double ratio = t.lr_schedule.min_lr / t.optimizer.lr;
  Diagnostic& w = c.diags.warning(
      k.where("train.min_lr"),
      fmt::format("'min' is an absolute lr, the floor of Muon's lr: {}", muon_groups(t)));
  Diagnostics::note(w, fmt::format("give the floor as a fraction of each group's peak lr instead: "
                                   "min_ratio = {} keeps these floors, min_ratio = 0.1 ends each "
                                   "group at a tenth of its peak",
                                   lr_text(ratio)));
}

// A note: muon() without adamw = adamw(...) gives the parameters that are no
// Muon matrix adamw()'s own defaults; say so, with both groups' lrs (unless
// the warning about an absolute floor says them).
void muon_nested_adamw_chosen(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  const Keys& k = c.keys;
  if (t.optimizer.kind != OptimizerKind::Muon || k.has("train.adamw") ||
      !k.usable({"train.lr_schedule", "train.optimizer"}))
    return;
  Diagnostic& n = c.diags.remark(
      k.where("train.optimizer"),
      fmt::format("muon() without 'adamw = adamw(...)': the parameters that are no Muon matrix "
                  "(embeddings, head, norms, biases) get adamw()'s default lr {}{}",
                  lr_text(t.optimizer.adamw.lr),
                  muon_floor_absolute(c) ? "" : "; " + muon_groups(t)));
  Diagnostics::note(n, "to give them an AdamW run's lr, write e.g. muon(adamw = adamw(lr = 1e-3))");
}

// A warning: only the final checkpoint is written.
void checkpoint_fires_within_the_run(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  if (!c.keys.usable({"train.checkpoint", "train.steps"}) || !t.checkpoint.enabled ||
      t.checkpoint.every <= t.steps)
    return;
  Diagnostic& w =
      c.diags.warning(c.keys.where("train.checkpoint.every"),
                      fmt::format("checkpoint every {} steps never fires in a run of {} steps; "
                                  "only the final checkpoint is written",
                                  t.checkpoint.every, t.steps));
  note_steps(c, w);
}

// val_every and val_sequences say how to evaluate a validation set the spec names.
void val_settings_need_val(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  if (t.val || !c.keys.usable({"train.val"})) return;
  for (const char* key : {"train.val_every", "train.val_sequences"}) {
    if (!c.keys.has(key)) continue;
    Diagnostic& e = c.diags.error(c.keys.where(key),
                                  fmt::format("'{}' is set but the spec names no validation data",
                                              std::string_view(key).substr(6)));
    Diagnostics::note(e, "add e.g. val = tokens(\"fineweb_val_*.bin\") to the train section");
  }
}

// eval_every and eval_examples say how to score an evaluation file the spec names.
void eval_settings_need_eval(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  if (!t.eval.empty() || !c.keys.usable({"train.eval"})) return;
  for (const char* key : {"train.eval_every", "train.eval_examples"}) {
    if (!c.keys.has(key)) continue;
    Diagnostic& e = c.diags.error(c.keys.where(key),
                                  fmt::format("'{}' is set but the spec names no evaluation file",
                                              std::string_view(key).substr(6)));
    Diagnostics::note(e,
                      "add e.g. eval = \"hellaswag_val.bin\" to the train section (docs/eval.md)");
  }
}

// sample_tokens sizes the samples that sample_every asks for.
void sample_tokens_need_samples(const CheckContext& c) {
  if (c.spec.train.sample_every > 0 || !c.keys.has("train.sample_tokens")) return;
  Diagnostic& e = c.diags.error(c.keys.where("train.sample_tokens"),
                                "'sample_tokens' is set but sample_every is 0 (no samples)");
  Diagnostics::note(e, "add e.g. sample_every = 100 to the train section (docs/sample.md)");
}

// Text is read as bytes (ids 0-255): into a smaller vocabulary they do not
// fit; into a larger one (a tokenizer's) they are a likely mistake, refused
// unless the source says allow_bytes = true.
void text_fits_the_vocabulary(const CheckContext& c) {
  const TrainSpec& t = c.spec.train;
  const int64_t vocab = c.spec.model.vocab;
  if (!c.keys.has("model.vocab") || !c.keys.usable({"model.vocab"}) || vocab == kByteVocab) return;
  auto check = [&](const DataSpec& d, const std::string& key) {
    if (d.kind != DataKind::Text || !c.keys.usable({key})) return;
    if (vocab < kByteVocab) {
      Diagnostic& e = c.diags.error(
          c.keys.where(key), fmt::format("text is read as bytes, token ids 0 to 255, which do not "
                                         "fit this model's vocabulary of {}",
                                         vocab));
      Diagnostics::note(e, c.keys.where("model.vocab"), "vocab is set here");
      Diagnostics::note(e,
                        "byte-level text needs vocab = 256; other data needs token files, "
                        "tokens(\"train.bin\") (docs/data.md#token-files)");
      return;
    }
    if (d.allow_bytes) return;
    Diagnostic& e = c.diags.error(
        c.keys.where(key),
        fmt::format("text is read as bytes, token ids 0 to 255, but this model's vocabulary has {} "
                    "tokens: it would train on raw bytes, not its tokenizer's tokens",
                    grouped(vocab)));
    Diagnostics::note(e, c.keys.where("model.vocab"), "vocab is set here");
    Diagnostics::note(e,
                      "tokenize the text with the model's tokenizer into llm.c token files and "
                      "read those: tokens(\"train.bin\") (docs/data.md#token-files); or "
                      "write text(\"...\", allow_bytes = true) to train on bytes anyway");
  };
  check(t.data, "train.data");
  if (t.val) check(*t.val, "train.val");
}

struct Rule {
  RuleSection section;
  void (*check)(const CheckContext&);
};

constexpr Rule kRules[] = {
    {RuleSection::Model, heads_divide_width},
    {RuleSection::Model, llama_head_size_even},
    {RuleSection::Model, kv_heads_only_for_llama},
    {RuleSection::Model, kv_heads_divide_heads},
    {RuleSection::Model, rope_theta_only_for_llama},
    {RuleSection::Model, rope_scaling_only_for_llama},
    {RuleSection::Model, qkv_bias_only_for_llama},
    {RuleSection::Model, qk_norm_only_for_llama},
    {RuleSection::Model, head_dim_only_for_llama},
    {RuleSection::Model, qk_norm_without_qkv_bias},
    {RuleSection::Model, block_norms_only_for_llama},
    {RuleSection::Model, post_norms_with_qk_norm},
    {RuleSection::Model, alternating_layers_complete},
    {RuleSection::Model, sliding_window_only_for_llama},
    {RuleSection::Model, global_every_only_for_llama},
    {RuleSection::Model, rope_local_theta_only_for_llama},
    {RuleSection::Model, scale_embedding_only_for_llama},
    {RuleSection::Model, norm_plus_one_only_for_llama},
    {RuleSection::Model, activation_only_for_llama},
    {RuleSection::Model, gemma_pieces_together},
    {RuleSection::Model, attention_softcap_only_for_llama},
    {RuleSection::Model, logit_softcap_only_for_llama},
    {RuleSection::Model, query_pre_attn_scalar_only_for_llama},
    {RuleSection::Parallel, ranks_per_node_divides_world},
    {RuleSection::Parallel, shard_align_is_a_power_of_two},
    {RuleSection::Parallel, shard_group_divides_world},
    {RuleSection::Parallel, hybrid_shards_and_replicates},
    {RuleSection::Parallel, shard_group_only_for_hybrid},
    {RuleSection::Parallel, offload_needs_sharding},
    {RuleSection::Parallel, activation_offload_needs_recompute},
    {RuleSection::Parallel, prefetch_needs_two_in_flight},
    {RuleSection::Parallel, loss_scale_needs_fp16},
    {RuleSection::Parallel, master_is_not_fp16},
    {RuleSection::Parallel, master_as_wide_as_param},
    {RuleSection::Train, warmup_within_the_run},
    {RuleSection::Train, min_lr_below_lr},
    {RuleSection::Train, muon_floor_is_absolute},
    {RuleSection::Train, muon_nested_adamw_chosen},
    {RuleSection::Train, checkpoint_fires_within_the_run},
    {RuleSection::Train, val_settings_need_val},
    {RuleSection::Train, eval_settings_need_eval},
    {RuleSection::Train, sample_tokens_need_samples},
    {RuleSection::Train, text_fits_the_vocabulary},
};

}  // namespace

bool check_rules(RuleSection section, const CheckContext& ctx) {
  const size_t errors_before = ctx.diags.error_count();
  for (const Rule& rule : kRules)
    if (rule.section == section) rule.check(ctx);
  return ctx.diags.error_count() == errors_before;
}

}  // namespace fsdpgen
