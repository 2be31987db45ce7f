// hf_config: config.json's keys against the model, family by family.
#include "runtime/files/hf_config.h"
#include "runtime/files/file_io.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

constexpr double kRelativeTolerance = 1e-6;

// The config's keys, read with their types checked, collecting differences.
class checker {
 public:
  checker(std::string path, json config) : path_(std::move(path)), c_(std::move(config)) {}

  const json* get(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t integer(const json& v, const std::string& key) const {
    if (!v.is_number_integer())
      throw std::runtime_error(
          fmt::format("{}: \"{}\" must be an integer, not {}", path_, key, v.dump()));
    return v.get<int64_t>();
  }
  double real(const json& v, const std::string& key) const {
    if (!v.is_number())
      throw std::runtime_error(
          fmt::format("{}: \"{}\" must be a number, not {}", path_, key, v.dump()));
    return v.get<double>();
  }
  void mismatch(const std::string& key, const std::string& got, const std::string& spec_key,
                const std::string& want) {
    out_.push_back({key, got, spec_key, want});
  }

  // key must be present and equal; absent: `fallback` when given, else a mismatch.
  void equal_int(const std::string& key, const std::string& spec_key, int64_t want,
                 const int64_t* fallback = nullptr) {
    const json* v = get(c_, key);
    if (!v && fallback) {
      if (*fallback != want)
        mismatch(key, fmt::format("absent ({})", *fallback), spec_key, fmt::format("{}", want));
      return;
    }
    if (!v) return mismatch(key, "absent", spec_key, fmt::format("{}", want));
    if (integer(*v, key) != want) mismatch(key, v->dump(), spec_key, fmt::format("{}", want));
  }
  void at_least(const std::string& key, const std::string& spec_key, int64_t want) {
    const json* v = get(c_, key);
    if (v && integer(*v, key) < want)
      mismatch(key, fmt::format("{} (shorter than the spec's)", v->dump()), spec_key,
               fmt::format("{}", want));
  }
  void equal_real(const json& obj, const std::string& key, const std::string& spec_key, double want,
                  double fallback) {
    const json* v = get(obj, key);
    const double got = v ? real(*v, key) : fallback;
    if (std::abs(got - want) > kRelativeTolerance * std::abs(want))
      mismatch(key, v ? v->dump() : fmt::format("absent ({})", fallback), spec_key,
               fmt::format("{}", want));
  }
  void equal_bool(const std::string& key, const std::string& spec_key, bool want, bool fallback) {
    const json* v = get(c_, key);
    if (v && !v->is_boolean())
      throw std::runtime_error(
          fmt::format("{}: \"{}\" must be true or false, not {}", path_, key, v->dump()));
    const bool got = v ? v->get<bool>() : fallback;
    if (got != want)
      mismatch(key, v ? v->dump() : fmt::format("absent ({})", fallback), spec_key,
               want ? "true" : "false");
  }
  void equal_string(const std::string& key, const std::string& what, const std::string& want) {
    const json* v = get(c_, key);
    if (!v) return;
    if (!v->is_string() || v->get<std::string>() != want)
      mismatch(key, v->dump(), what, fmt::format("\"{}\"", want));
  }
  // A feature fsdpgen does not build must be off (false or absent).
  void off(const std::string& key, const std::string& why) {
    const json* v = get(c_, key);
    if (v && v->is_boolean() && v->get<bool>()) mismatch(key, "true", why, "false");
  }

  const json& config() const { return c_; }
  std::vector<hf_mismatch> result() { return std::move(out_); }

 private:
  std::string path_;
  json c_;
  std::vector<hf_mismatch> out_;
};

void check_gpt2(checker& c, const hf_model& m) {
  c.equal_string("model_type", "family", "gpt2");
  c.equal_int("n_embd", "width", m.width);
  c.equal_int("n_head", "heads", m.heads);
  c.equal_int("n_layer", "layers", m.layers);
  const int64_t four_c = 4 * m.width;
  c.equal_int("n_inner", "ffn_hidden", m.ffn_hidden, &four_c);
  c.equal_int("vocab_size", "vocab", m.vocab);
  c.at_least("n_positions", "context", m.context);
  c.equal_real(c.config(), "layer_norm_epsilon", "norm_eps", m.norm_eps, 1e-5);
  c.equal_string("activation_function", "gpt2's GELU (tanh)", "gelu_new");
  c.equal_bool("tie_word_embeddings", "tie_embeddings", m.tied, true);
}

// rope_scaling (transformers 4) or rope_parameters (5): llama3's four keys.
void check_rope(checker& c, const hf_model& m) {
  const json& config = c.config();
  const json* params = c.get(config, "rope_parameters");
  const json* scaling = c.get(config, "rope_scaling");
  const json& theta_holder = params && params->contains("rope_theta") ? *params : config;
  c.equal_real(theta_holder, "rope_theta", "rope_theta", m.rope_theta, 10000.0);
  if (!scaling && params && params->contains("rope_type") && (*params)["rope_type"] != "default")
    scaling = params;
  const std::string type =
      scaling && scaling->contains("rope_type") ? (*scaling)["rope_type"].dump() : "none";
  if (m.rope_factor <= 0) {
    if (scaling && type != "\"default\"")
      c.mismatch("rope_scaling", scaling->dump(), "rope_scaling", "none");
    return;
  }
  if (!scaling || type != "\"llama3\"")
    return c.mismatch("rope_scaling", scaling ? scaling->dump() : "absent", "rope_scaling",
                      "llama3(...)");
  c.equal_real(*scaling, "factor", "rope_scaling factor", m.rope_factor, 0);
  c.equal_real(*scaling, "low_freq_factor", "rope_scaling low_freq", m.rope_low_freq, 0);
  c.equal_real(*scaling, "high_freq_factor", "rope_scaling high_freq", m.rope_high_freq, 0);
  c.equal_real(*scaling, "original_max_position_embeddings", "rope_scaling original_context",
               static_cast<double>(m.rope_original_context), 0);
}

void check_llama(checker& c, const hf_model& m) {
  c.equal_string("model_type", "family", "llama");
  c.equal_int("hidden_size", "width", m.width);
  c.equal_int("num_attention_heads", "heads", m.heads);
  c.equal_int("num_key_value_heads", "kv_heads", m.kv_heads, &m.heads);
  const int64_t head_size = m.width / m.heads;
  c.equal_int("head_dim", "width / heads", head_size, &head_size);
  c.equal_int("intermediate_size", "ffn_hidden", m.ffn_hidden);
  c.equal_int("num_hidden_layers", "layers", m.layers);
  c.equal_int("vocab_size", "vocab", m.vocab);
  c.at_least("max_position_embeddings", "context", m.context);
  c.equal_real(c.config(), "rms_norm_eps", "norm_eps", m.norm_eps, 1e-6);
  c.equal_string("hidden_act", "llama's SwiGLU (silu)", "silu");
  c.equal_bool("tie_word_embeddings", "tie_embeddings", m.tied, false);
  c.off("attention_bias", "fsdpgen's llama has no attention biases");
  c.off("mlp_bias", "fsdpgen's llama has no MLP biases");
  check_rope(c, m);
}

}  // namespace

std::string hf_config_text(const hf_model& m) {
  json c;
  if (m.llama) {
    c = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"hidden_size", m.width},
         {"num_attention_heads", m.heads},
         {"num_key_value_heads", m.kv_heads},
         {"head_dim", m.width / m.heads},
         {"intermediate_size", m.ffn_hidden},
         {"num_hidden_layers", m.layers},
         {"vocab_size", m.vocab},
         {"max_position_embeddings",
          std::max<int64_t>(m.context, m.rope_factor > 0 ? 2 * m.rope_original_context : 0)},
         {"rms_norm_eps", m.norm_eps},
         {"hidden_act", "silu"},
         {"rope_theta", m.rope_theta},
         {"rope_scaling", nullptr},
         {"tie_word_embeddings", m.tied},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"torch_dtype", "float32"}};
    if (m.rope_factor > 0)
      c["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", m.rope_factor},
                           {"low_freq_factor", m.rope_low_freq},
                           {"high_freq_factor", m.rope_high_freq},
                           {"original_max_position_embeddings", m.rope_original_context}};
  } else {
    c = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"n_embd", m.width},
         {"n_head", m.heads},
         {"n_layer", m.layers},
         {"n_inner", m.ffn_hidden},
         {"vocab_size", m.vocab},
         {"n_positions", m.context},
         {"layer_norm_epsilon", m.norm_eps},
         {"activation_function", "gelu_new"},
         {"tie_word_embeddings", m.tied},
         {"torch_dtype", "float32"}};
  }
  return c.dump(2) + "\n";
}

std::vector<hf_mismatch> hf_config_mismatches(const std::string& path, const hf_model& m) {
  const std::string text = file_read_whole(path, kJsonFileMaxBytes);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!config.is_object()) throw std::runtime_error(fmt::format("{}: not a JSON object", path));
  checker c(path, std::move(config));
  if (m.llama)
    check_llama(c, m);
  else
    check_gpt2(c, m);
  return c.result();
}
