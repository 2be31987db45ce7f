// hf_config: a Hugging Face config.json checked against the model a program
// was built for, so that --init-from a model directory of another shape (or
// with features fsdpgen does not build: biases, sliding windows, another
// activation) stops with every difference named, before any weight is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// The model's facts a config.json states (a program's model, in plain terms).
struct hf_model {
  bool llama = false;  // else gpt2
  int64_t vocab = 0, context = 0, width = 0, heads = 0, kv_heads = 0, layers = 0, ffn_hidden = 0;
  bool tied = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  double rope_factor = 0;  // llama3 scaling (0: none)
  double rope_low_freq = 0, rope_high_freq = 0;
  int64_t rope_original_context = 0;
};

// One difference: the config's key and value, the spec's key and value
// (values as text, e.g. "8" and "4").
struct hf_mismatch {
  std::string config_key, config_value, spec_key, spec_value;
};

// Every difference between the config at `path` and the model; empty when it
// matches. Keys: gpt2's n_embd, n_head, n_layer, n_inner (null: 4 x n_embd),
// vocab_size, n_positions (at least the spec's context), layer_norm_epsilon,
// activation_function (gelu_new), tie_word_embeddings; llama's hidden_size,
// num_attention_heads, num_key_value_heads (absent: heads), head_dim (absent:
// hidden_size / heads; fsdpgen's heads are that wide), intermediate_size,
// num_hidden_layers, vocab_size, max_position_embeddings (at least the
// context), rms_norm_eps, hidden_act (silu), rope_theta and rope_scaling
// (or transformers 5's rope_parameters), tie_word_embeddings, and no
// attention_bias or mlp_bias. model_type must name the family. Floats agree
// within 1e-6 relative. Throws std::runtime_error naming the file (and the
// key) when it cannot be read, is not a JSON object or a key has a wrong type.
std::vector<hf_mismatch> hf_config_mismatches(const std::string& path, const hf_model& m);

// The config.json of the model, for transformers' LlamaForCausalLM or
// GPT2LMHeadModel (fp32 weights): what hf_config_mismatches reads, so that
// a directory with it and the weights loads with from_pretrained as it is.
std::string hf_config_text(const hf_model& m);
