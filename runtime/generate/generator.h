// generator: text generation on the CPU for the two families fsdpgen builds,
// from fp32 tensors under their Hugging Face names and the model's facts
// (hf_model, runtime/files/hf_config.h). GPT-2: LayerNorm, gelu_new (tanh),
// learned positions, Conv1D weights (in, out), head tied or not. Llama:
// RMSNorm, SwiGLU, rotary positions (llama3 scaling too), grouped-query
// attention, nn.Linear weights (out, in). The prompt is prefilled in one
// pass, then each new token runs against a KV cache. Formulas shared with
// the training kernels (runtime/kernel_math.h, runtime/rope.h); matrix
// products through OpenBLAS. No MPI: `fsdpgen sample` and the training
// loop's samples both link it.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/files/hf_config.h"

// One tensor: its data (fp32, row-major) and shape; the data is the
// caller's and must outlive the generator.
struct generate_tensor {
  const float* data = nullptr;
  std::vector<int64_t> shape;
};
using generate_tensors = std::map<std::string, generate_tensor, std::less<>>;

// Owned tensors (a checkpoint or a safetensors file read whole), viewed as
// generate_tensors.
struct generate_weights {
  std::map<std::string, std::vector<float>, std::less<>> data;
  std::map<std::string, std::vector<int64_t>, std::less<>> shapes;
  generate_tensors view() const;
};

// The safetensors file, model directory or index (runtime/files/
// safetensors_set.h) read whole into fp32 (F32, BF16, F16 converted).
generate_weights generate_weights_read(const std::string& path);

// The Hugging Face names and shapes the model needs, in order (a tied
// model's lm_head.weight is left out: it is the embedding).
std::vector<std::pair<std::string, std::vector<int64_t>>> generate_tensor_names(const hf_model& m);

// How the next token is drawn from the logits. temperature 0 is greedy (the
// first largest logit); else the logits are divided by temperature, top_k
// (0: all) keeps the k most likely tokens, top_p (1: all) the fewest most
// likely whose probability sums to at least top_p, and one is drawn from
// what is left, renormalized. The generator is std::mt19937_64 seeded with
// `seed` (its sequence is fixed by the C++ standard), one 64-bit draw a
// token turned into u = (draw >> 11) / 2^53 in [0, 1): the token is the
// first, most likely first (ties by id), whose cumulative probability
// exceeds u. A seeded run is the same on any machine.
struct sample_settings {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 1337;
};
// "" when the settings are valid, else what is wrong (temperature < 0,
// top_k < 0, top_p outside (0, 1]).
std::string sample_settings_problem(const sample_settings& s);

class generator {
 public:
  // Checks that every tensor the model needs is there with its shape
  // (std::runtime_error naming the tensor, its shape and the expected one)
  // and allocates the KV cache (layers x context x kv width, K and V) and
  // the scratch for up to `context` positions at once: all allocation
  // happens here.
  generator(const hf_model& m, const generate_tensors& tensors);

  const hf_model& model() const { return m_; }
  // Bytes the generator allocated (cache, scratch, rope tables).
  int64_t bytes() const { return bytes_; }
  // Positions in the cache.
  int64_t cached() const { return cached_; }
  void reset() { cached_ = 0; }

  // Runs ids at positions [cached(), cached() + n) against the cache and
  // appends them to it. Returns the last position's logits (vocab); with
  // all_logits, also writes every position's (n x vocab) there. Throws
  // std::invalid_argument for an id outside the vocabulary or positions past
  // the context.
  const float* forward(std::span<const int32_t> ids, float* all_logits = nullptr);

  // The next token from logits (vocab) under the settings, drawing from rng
  // unless greedy. Allocates nothing.
  int32_t pick(const float* logits, const sample_settings& s, std::mt19937_64& rng);

  // From a fresh cache: prefills the prompt (at least one id), then adds
  // `tokens` tokens one at a time (fewer when the context fills), drawn with
  // a generator seeded with s.seed. Returns the new ids (not the prompt).
  std::vector<int32_t> generate(std::span<const int32_t> prompt, int64_t tokens,
                                const sample_settings& s);

 private:
  const float* weight(std::string_view name) const;
  void block(int64_t layer, int64_t n);
  void attention(int64_t layer, int64_t n);

  hf_model m_;
  int64_t head_dim_ = 0, q_width_ = 0, kv_width_ = 0;  // q is heads x head_dim_ wide
  // Views of the weights, by name.
  std::map<std::string, const float*, std::less<>> w_;
  const float* head_ = nullptr;        // (vocab, width): lm_head.weight or the tied embedding
  std::vector<const float*> block_w_;  // [layer * block rows + row], the family's block table
  int64_t cached_ = 0;
  int64_t bytes_ = 0;
  // Cache: (layers, context, kv width) each.
  std::vector<float> k_cache_, v_cache_;
  // Scratch over up to context rows.
  std::vector<float> x_, h_, qkv_, attn_, ffn_, scores_, logits_;
  std::vector<float> rope_cos_, rope_sin_;  // (context, head_dim / 2) each
  std::vector<int32_t> order_;              // sampling's ids, by probability
};
