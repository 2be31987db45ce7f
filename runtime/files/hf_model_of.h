// hf_model_of: the one mapping of a model to what its Hugging Face
// config.json states. Two holders of a model use it: the spec's model
// (dsl/Spec.h's ModelSpec: `fsdpgen import-hf`, `check --hf` and the
// config.json `fsdpgen merge` writes) and the program's (runtime/program.h's
// program_model, which the emitter writes from the spec's: --init-from a
// model directory). It is a template over the two so that the runtime needs
// no spec and the spec no program (no include climbs); the facts both hold
// under one name (qkv_bias among them) are copied once, and the four each holds its own way (the
// family, tied embeddings, rotary positions, the MLP's gate) are read side by side below.
#pragma once

#include <cstdint>
#include <string>

#include <cmath>
#include <string>

#include "runtime/files/hf_config.h"

template <class Model>
hf_model hf_model_of(const Model& m) {
  hf_model h;
  h.vocab = m.vocab;
  h.context = m.context;
  h.width = m.width;
  h.heads = m.heads;
  h.kv_heads = m.kv_heads > 0 ? m.kv_heads : m.heads;  // a program's 0: one per head
  h.layers = m.layers;
  h.ffn_hidden = m.ffn_hidden;
  h.norm_eps = m.norm_eps;
  h.qkv_bias = m.qkv_bias;
  h.qk_norm = m.qk_norm;
  h.qk_norm_across_heads = m.qk_norm_across_heads;
  h.window = m.sliding_window;
  h.scale_embedding = m.scale_embedding;
  h.norm_plus_one = m.norm_plus_one;
  h.global_every = m.global_every;
  h.attention_softcap = m.attention_softcap;
  h.logit_softcap = m.logit_softcap;
  if constexpr (requires { m.rope_scaling; }) {  // the spec's model
    h.llama = m.family == decltype(m.family)::Llama;
    h.tied = m.tie_embeddings;
    h.head_dim = m.head_dim();
    h.query_pre_attn_scalar = m.query_pre_attn_scalar;
    h.post_norm = m.post_norm();
    h.sandwich_norm = m.sandwich_norm();
    h.rope_local_theta = m.rope_local_theta;
    h.gelu_gate = m.activation == decltype(m.activation)::GeluTanh;
    h.rope_theta = m.rope_theta;
    if (m.rope_scaling.enabled) {
      h.rope_factor = m.rope_scaling.factor;
      h.rope_linear = m.rope_scaling.linear;
      h.rope_low_freq = m.rope_scaling.low_freq;
      h.rope_high_freq = m.rope_scaling.high_freq;
      h.rope_original_context = m.rope_scaling.original_context;
    }
  } else {  // the program's: its rope's factor is 0 (and the rest with it) when unscaled
    h.llama = m.family == decltype(m.family)::llama;
    h.tied = m.tied;
    h.head_dim = m.head_size();
    h.query_pre_attn_scalar = m.query_pre_attn_scalar;
    h.post_norm = m.post_norm;
    h.sandwich_norm = m.sandwich_norm;
    h.rope_local_theta = m.rope.local_theta;
    h.gelu_gate = m.gelu_gate;
    h.rope_theta = m.rope.theta;
    h.rope_factor = m.rope.factor;
    h.rope_linear = m.rope.linear;
    h.rope_low_freq = m.rope.low_freq;
    h.rope_high_freq = m.rope.high_freq;
    h.rope_original_context = m.rope.original_context;
  }
  // A query_pre_attn_scalar of the head size is the head size's scale: none.
  if (h.query_pre_attn_scalar == static_cast<double>(h.head_dim)) h.query_pre_attn_scalar = 0;
  return h;
}

// What the model holds that its config.json cannot state, or "": Gemma 2's
// soft-caps and a query_pre_attn_scalar other than the head size, which
// only Gemma 2's and 3's classes (sandwich norms) read. --save and merge
// refuse a model directory for such a model rather than write one that
// loads without them.
template <class Model>
std::string hf_model_unstated(const Model& m) {
  const hf_model h = hf_model_of(m);
  const double q = h.query_pre_attn_scalar;
  if (q != std::floor(q) || q > 1e9)
    return "its query_pre_attn_scalar " + std::to_string(q) +
           " is not a whole number, which transformers' Gemma configs require; a .safetensors "
           "file holds the weights, and fsdpgen sample runs it with --spec";
  if (h.sandwich_norm) return "";  // Gemma2ForCausalLM and Gemma3ForCausalLM state them
  std::string keys;
  auto add = [&keys](const char* key) { keys += (keys.empty() ? "" : ", ") + std::string(key); };
  if (h.attention_softcap != 0) add("attention_softcap");
  if (h.logit_softcap != 0) add("logit_softcap");
  if (h.query_pre_attn_scalar != 0) add("query_pre_attn_scalar");
  if (keys.empty()) return "";
  return "its config.json cannot state " + keys +
         ": only Gemma 2's and 3's classes have them (block_norms = sandwich with Gemma's "
         "pieces); a .safetensors file holds the weights, and fsdpgen sample runs it with --spec";
}
