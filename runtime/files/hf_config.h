// hf_config: a Hugging Face config.json checked against the model a program
// was built for, so that --init-from a model directory of another shape (or
// with features fsdpgen does not build: biases, sliding windows, another
// activation) stops with every difference named, before any weight is read;
// and read into a model, for `fsdpgen import-hf` to write a spec of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// The model's facts a config.json states (a program's model, in plain terms).
struct hf_model {
  bool llama = false;  // else gpt2
  // The transformers class of the config read ("MistralForCausalLM": a
  // config of llama's architecture under another name); "" for a model that
  // a spec or a program states.
  std::string lm_class;
  int64_t vocab = 0, context = 0, width = 0, heads = 0, kv_heads = 0, layers = 0, ffn_hidden = 0;
  bool tied = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000;
  // The rotary frequencies' scaling (factor 0: none): llama3's, or linear's
  // (the factor alone; rope.h's rope_scaling).
  double rope_factor = 0;
  bool rope_linear = false;
  double rope_low_freq = 0, rope_high_freq = 0;
  int64_t rope_original_context = 0;
  // The attention window (sliding_window; 0: none): each query attends the
  // last `window` positions. A window of at least the context is plain causal attention.
  int64_t window = 0;
  bool qkv_bias = false;  // llama: q, k and v have biases (Qwen2's architecture)
  bool qk_norm = false;   // llama: each head's q and k pass an RMSNorm (Qwen3's architecture)
  int64_t head_dim = 0;   // llama: the head size (0: width / heads)
  // llama with qk_norm: one RMSNorm over all of q's heads and one over k's (OLMo 2's architecture)
  bool qk_norm_across_heads = false;
  // llama: the norms follow attention and the MLP, before each residual add
  // (OLMo 2's post_attention_layernorm and post_feedforward_layernorm)
  bool post_norm = false;
  // llama: Gemma's embedding scaled by sqrt(width) and RMSNorms scaling by (1
  // + weight) (GemmaForCausalLM's architecture, both or neither); the MLP's
  // gate GELU in its tanh form (hidden_act gelu_pytorch_tanh) rather than SiLU.
  bool scale_embedding = false;
  bool norm_plus_one = false;
  bool gelu_gate = false;
  // llama with Gemma's pieces: norms before and after each sub-block (Gemma 2's and 3's
  // architecture); every global_every-th layer global, the others local (layer_types
  // "sliding_attention": the window; 0: every layer alike); the local layers' rotary base
  // (Gemma 3's rope_local_base_freq; 0: rope_theta).
  bool sandwich_norm = false;
  int64_t global_every = 0;
  double rope_local_theta = 0;
  // llama: Gemma 2's attention scores and logits soft-capped, X tanh(x / X)
  // (attn_logit_softcapping, final_logit_softcapping; 0: none), and q . k
  // scaled by query_pre_attn_scalar^-0.5 (0: the head size's, as where it is the head size).
  double attention_softcap = 0;
  double logit_softcap = 0;
  double query_pre_attn_scalar = 0;
};

// One difference: the config's key and value, the spec's key and value
// (values as text, e.g. "8" and "4"). For a key no spec can match (a bias,
// another activation, a sliding window) `unbuildable` is set, spec_key says
// why and spec_value what fsdpgen builds.
struct hf_mismatch {
  std::string config_key, config_value, spec_key, spec_value;
  bool unbuildable = false;
};

// A key of a config.json that no fsdpgen model holds: the key ("rope_scaling.
// rope_type" inside an object), its value as written ("absent" for a key the
// family needs that is missing) and why.
struct hf_problem {
  std::string key, value, why;
};

// The keys each family reads, with transformers' defaults where one is absent:
// gpt2's n_embd, n_head, n_layer, n_inner (null: 4 x n_embd), vocab_size,
// n_positions (1024), layer_norm_epsilon (1e-5), activation_function
// (gelu_new), tie_word_embeddings (true), and no scale_attn_by_inverse_layer_idx
// or add_cross_attention; llama's hidden_size, num_attention_heads,
// num_key_value_heads (heads), head_dim (hidden_size / heads), intermediate_size,
// num_hidden_layers, vocab_size, max_position_embeddings (2048), rms_norm_eps (1e-6), hidden_act
// (silu), rope_theta (10000) and rope_scaling (none, llama3's factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings, or linear's factor), or transformers 5's
// rope_parameters for both, tie_word_embeddings (false), sliding_window (null; LlamaForCausalLM
// ignores it, so one shorter than the positions is refused), and no attention_bias or mlp_bias.
// Mistral's config (model_type "mistral", MistralForCausalLM) is llama's architecture with a
// sliding window on every layer (the spec's sliding_window) and other defaults
// (num_key_value_heads 8, max_position_embeddings 131072, sliding_window
// 4096); Qwen2's (model_type "qwen2", Qwen2ForCausalLM) is llama's with
// biases on q, k and v (qkv_bias) and its defaults (num_key_value_heads 32,
// max_position_embeddings 32768, tie_word_embeddings false), its
// sliding_window (4096) read only where use_sliding_window is true, and then
// a window when every layer slides (layer_types, else max_window_layers 0;
// default 28), none when none does, refused when some do; Qwen3's (model_type "qwen3",
// Qwen3ForCausalLM) is llama's with an RMSNorm on each head's q and k (qk_norm) and Qwen2's
// defaults but head_dim 128; OLMo 2's (model_type "olmo2", Olmo2ForCausalLM) is llama's
// with its norms after attention and the MLP (post_norm) and an RMSNorm across all of
// q's and all of k's heads (qk_norm_across_heads), rms_norm_eps 1e-5 when absent, and
// no sliding window. model_type must name the family and
// architectures, when given, hold its LM class; a family transformers builds
// that fsdpgen does not (gemma, gemma2, gemma3) is named with
// what of it fsdpgen cannot represent. A config that cannot be read, is not a JSON object or has
// a key of a wrong type (or an integer below 1) throws std::runtime_error
// naming the file and the key.

// The model the config at `path` describes, of the family its model_type (or
// architectures) names; its positions are the context. Every key it cannot represent is appended
// to *problems, all of them (the model is then partial).
hf_model hf_model_of_config(const std::string& path, std::vector<hf_problem>* problems);

// Every difference between the config at `path` and the model, read as the
// model's family; empty when it matches. The config's positions must be at
// least the model's context, and its sliding window the model's at that
// context (none and a window of at least the context are the same);
// floats agree within 1e-6 relative.
std::vector<hf_mismatch> hf_config_mismatches(const std::string& path, const hf_model& m);

// The special-token ids of a model's config.json and generation_config.json;
// -1 where there is none (written null).
struct hf_special_ids {
  int64_t bos = -1, eos = -1, pad = -1;
};

// The ids a model has without a tokenizer to say them (a spec names none):
// bos and eos GPT-2's <|endoftext|> (50256) for a gpt2 model of 50257
// tokens or more, else none (the family defaults transformers would fill
// in, GPT-2's 50256 and Llama's 1 and 2, lie outside a byte-level
// vocabulary of 256 or name ordinary tokens); no pad.
hf_special_ids hf_special_ids_by_vocab(const hf_model& m);

// The model_type transformers knows the model as: "gpt2", "llama", or one of
// llama's options: "olmo2" (post_norm), "qwen3" (qk_norm), "qwen2" (qkv_bias),
// "mistral" (a window alone). hf_config_text writes it, and fsdpgen sample names it.
const char* hf_model_type(const hf_model& m);

// The config.json of the model, for transformers' LlamaForCausalLM (with a
// window MistralForCausalLM, with qkv_bias Qwen2ForCausalLM, with qk_norm
// Qwen3ForCausalLM: their windows on every layer; with post_norm Olmo2ForCausalLM) or
// GPT2LMHeadModel: what hf_config_mismatches reads, so that a directory with it and the weights
// loads with from_pretrained as it is. bos_token_id and eos_token_id are `ids`' (the tokenizer's,
// from the token set's manifest), by default hf_special_ids_by_vocab's; an id outside the
// vocabulary is an internal error. torch_dtype names the weights' dtype ("float32", "bfloat16" or
// "float16").
std::string hf_config_text(const hf_model& m);
std::string hf_config_text(const hf_model& m, const hf_special_ids& ids,
                           const std::string& torch_dtype = "float32");

// generation_config.json as transformers writes one from a model's config:
// bos_token_id, eos_token_id and pad_token_id (null where there is none).
std::string hf_generation_config_text(const hf_special_ids& ids);
