// init: GPT-2 parameter initialization that does not depend on sharding.
// Element i of tensor `name` is a function of (seed, name, i) only, so each
// rank can initialize just its shard and get what a single process would.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// Hugging Face GPT2PreTrainedModel._init_weights, by tensor name:
//   *.bias                                 zeros
//   LayerNorm weights (ln_1, ln_2, ln_f)   ones
//   attn.c_proj.weight, mlp.c_proj.weight  normal(0, 0.02 / sqrt(2 * n_layer))
//   other weights (wte, wpe, c_attn, c_fc, lm_head)  normal(0, 0.02)
// Norm modules are recognized by an "ln_" prefix or "norm" in their name, so
// llama's names (input_layernorm, model.norm) get ones too, as in Hugging Face.
enum class init_kind { zeros, ones, normal };
struct init_rule {
  init_kind kind = init_kind::zeros;
  float stddev = 0;  // normal only
};

// The rule for a tensor; throws std::runtime_error for a name that is not
// "<module>.weight" or "<module>.bias".
init_rule init_gpt2_rule(std::string_view tensor_name, int64_t n_layer);

// out[0, end - begin) = elements [begin, end) of the tensor (flattened,
// row-major). Normal values come from a counter-based generator (splitmix64 of
// seed, name hash and element index, then Box-Muller).
void init_gpt2_range(float* out, std::string_view tensor_name, int64_t n_layer, uint64_t seed,
                     int64_t begin, int64_t end);

// out[0, end - begin) = elements [begin, end) of tensor `name` under `rule`
// (normal values drawn as init_gpt2_range draws them).
void init_range(float* out, std::string_view tensor_name, init_rule rule, uint64_t seed,
                int64_t begin, int64_t end);

// AdamW weight decay applies to the randomly initialized tensors (matrices and
// embeddings: every tensor with >= 2 dims in GPT-2), not to biases or norms.
bool init_weight_decays(std::string_view tensor_name);

struct program_tensor;
// A program's tensor's rule: its own (a custom layer's) or init_gpt2_rule's,
// whose ones are zeros where norms scale by (1 + weight) (Gemma's
// norm_plus_one); and whether weight decay applies to it (the randomly
// initialized ones).
init_rule init_tensor_rule(const program_tensor& t, int64_t n_layer, bool norm_plus_one = false);
bool init_tensor_decays(const program_tensor& t);

struct program;
// What initializes the program's weights, for the banner: "GPT-2 init"
// ("Llama init"), and where custom layers declare their own, each of their
// tensors once by module and member: "GPT-2 init; custom layers as their
// headers declare: mlp.fc_w normal(0.0125), mlp.fc_b zeros".
std::string init_describe(const program& p);
