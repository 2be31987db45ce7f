// hf_config: config.json's keys read into a model, family by family, in one
// list that both the reading and the comparison with another model walk.
#include "runtime/files/hf_config.h"
#include "runtime/files/file_io.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

constexpr double kRelativeTolerance = 1e-6;

// The member of hf_model a key states.
using model_field = std::variant<int64_t hf_model::*, double hf_model::*, bool hf_model::*>;

// One key of a config as read, in the order the families list them.
struct config_key {
  enum class kind {
    equal,     // the model's value
    at_least,  // positions: at least the model's context
    scaling,   // rope scaling: present (llama3) or not, as the model's
    scaled,    // a value of llama3's scaling: compared when both scale
    differs,   // a value fsdpgen does not build, or another family's model_type
  };
  kind how = kind::equal;
  std::string key{};        // the config's key, e.g. n_embd or factor
  std::string holder{};     // the object it is in, e.g. rope_scaling; "" for the top level
  std::string text{};       // as written; "absent (X)" where the default X stood in
  bool missing = false;     // absent, and the family has no default
  std::string spec_key{};   // the spec's key it states; differs: why fsdpgen cannot build it
  model_field field{};      // all but differs
  std::string want{};       // differs: what fsdpgen builds
  bool unbuildable = true;  // differs: no spec matches it

  std::string qualified() const { return holder.empty() ? key : holder + "." + key; }
};

// A config's keys read with their types checked: the model they state and
// the list of keys, in order.
class config_reader {
 public:
  config_reader(std::string path, json config) : path_(std::move(path)), c_(std::move(config)) {}

  hf_model model;
  std::vector<config_key> keys;

  const json& config() const { return c_; }
  const json* get(const json& obj, const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  // An object-valued key, or null when absent.
  const json* object(const std::string& key) const {
    const json* v = get(c_, key);
    if (v && !v->is_object())
      throw std::runtime_error(
          fmt::format("{}: \"{}\" must be an object, not {}", path_, key, v->dump()));
    return v;
  }
  // A string-valued key of `obj`, or `fallback` when absent.
  std::string string_or(const json& obj, const std::string& key,
                        const std::string& fallback) const {
    const json* v = get(obj, key);
    if (v && !v->is_string())
      throw std::runtime_error(
          fmt::format("{}: \"{}\" must be a string, not {}", path_, key, v->dump()));
    return v ? v->get<std::string>() : fallback;
  }

  // A key stating `field`; `fallback` stands in where it is absent, else the key is missing.
  template <typename T>
  void read(const json& obj, const std::string& holder, const std::string& key,
            const std::string& spec_key, T hf_model::*field, std::optional<T> fallback,
            config_key::kind how = config_key::kind::equal) {
    config_key k{.how = how, .key = key, .holder = holder, .spec_key = spec_key, .field = field};
    if (const json* v = get(obj, key)) {
      model.*field = value<T>(*v, key);
      k.text = v->dump();
    } else if (fallback) {
      model.*field = *fallback;
      k.text = fmt::format("absent ({})", *fallback);
    } else {
      k.text = "absent";
      k.missing = true;
    }
    keys.push_back(std::move(k));
  }
  // Whether llama3's scaling is there (`text`: the object, or "absent").
  void scaling(const std::string& holder, std::string text) {
    keys.push_back({.how = config_key::kind::scaling,
                    .key = holder,
                    .text = std::move(text),
                    .spec_key = "rope_scaling",
                    .field = &hf_model::rope_factor});
  }
  void differs(const std::string& key, const std::string& holder, std::string text, std::string why,
               std::string want, bool unbuildable = true) {
    keys.push_back({.how = config_key::kind::differs,
                    .key = key,
                    .holder = holder,
                    .text = std::move(text),
                    .spec_key = std::move(why),
                    .want = std::move(want),
                    .unbuildable = unbuildable});
  }
  // A string key that must be `want` when given.
  void string_is(const std::string& key, const std::string& want, const std::string& why) {
    const json* v = get(c_, key);
    if (v && (!v->is_string() || v->get<std::string>() != want))
      differs(key, "", v->dump(), why, fmt::format("\"{}\"", want));
  }
  // A feature fsdpgen does not build must be off (false or absent).
  void off(const std::string& key, const std::string& why) {
    const json* v = get(c_, key);
    if (v && value<bool>(*v, key)) differs(key, "", "true", why, "false");
  }

 private:
  template <typename T>
  T value(const json& v, const std::string& key) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean())
        throw std::runtime_error(
            fmt::format("{}: \"{}\" must be true or false, not {}", path_, key, v.dump()));
      return v.get<bool>();
    } else if constexpr (std::is_same_v<T, double>) {
      if (!v.is_number())
        throw std::runtime_error(
            fmt::format("{}: \"{}\" must be a number, not {}", path_, key, v.dump()));
      return v.get<double>();
    } else {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX) ||
          v.get<int64_t>() < 1)
        throw std::runtime_error(fmt::format("{}: \"{}\" must be an integer (at least 1), not {}",
                                             path_, key, v.dump()));
      return v.get<int64_t>();
    }
  }

  std::string path_;
  json c_;
};

// model_type, and architectures when given, as the family's; false when
// model_type names another (its keys are then not the family's to read).
bool read_family(config_reader& r) {
  const std::string type = r.model.llama ? "llama" : "gpt2";
  const std::string lm = r.model.llama ? "LlamaForCausalLM" : "GPT2LMHeadModel";
  if (const json* v = r.get(r.config(), "model_type");
      v && (!v->is_string() || v->get<std::string>() != type)) {
    r.differs("model_type", "", v->dump(), "family", type, false);
    return false;
  }
  const json* arch = r.get(r.config(), "architectures");
  if (arch && !(arch->is_array() && std::find(arch->begin(), arch->end(), lm) != arch->end()))
    r.differs("architectures", "", arch->dump(), fmt::format("fsdpgen's {} is {}", type, lm),
              fmt::format("[\"{}\"]", lm));
  return true;
}

void read_gpt2(config_reader& r) {
  const json& c = r.config();
  r.read<int64_t>(c, "", "n_embd", "width", &hf_model::width, {});
  r.read<int64_t>(c, "", "n_head", "heads", &hf_model::heads, {});
  r.model.kv_heads = r.model.heads;
  r.read<int64_t>(c, "", "n_layer", "layers", &hf_model::layers, {});
  // n_inner's default follows n_embd: without one, n_embd's absence says it all.
  // An n_embd beyond 2^61 has no 4 x n_embd: n_inner is then missing.
  int64_t four_c = 0;
  const bool fits = !__builtin_mul_overflow(int64_t{4}, r.model.width, &four_c);
  if (r.model.width > 0 || r.get(c, "n_inner"))
    r.read<int64_t>(c, "", "n_inner", "ffn_hidden", &hf_model::ffn_hidden,
                    fits ? std::optional<int64_t>(four_c) : std::nullopt);
  r.read<int64_t>(c, "", "vocab_size", "vocab", &hf_model::vocab, {});
  r.read<int64_t>(c, "", "n_positions", "context", &hf_model::context, 1024,
                  config_key::kind::at_least);
  r.read<double>(c, "", "layer_norm_epsilon", "norm_eps", &hf_model::norm_eps, 1e-5);
  r.string_is("activation_function", "gelu_new", "fsdpgen's gpt2 builds GELU with tanh");
  r.read<bool>(c, "", "tie_word_embeddings", "tie_embeddings", &hf_model::tied, true);
  r.off("scale_attn_by_inverse_layer_idx",
        "fsdpgen's gpt2 scales attention by 1 / sqrt(head size) alone");
  r.off("add_cross_attention", "fsdpgen's gpt2 has no cross-attention");
}

// rope_theta and rope_scaling (transformers 4) or rope_parameters (5):
// unscaled, or llama3's four keys.
void read_rope(config_reader& r) {
  const json* params = r.object("rope_parameters");
  const json* scaling = r.object("rope_scaling");
  std::string holder = "rope_scaling";
  const bool theta_in_params = params && r.get(*params, "rope_theta");
  r.read<double>(theta_in_params ? *params : r.config(), theta_in_params ? "rope_parameters" : "",
                 "rope_theta", "rope_theta", &hf_model::rope_theta, 10000.0);
  if (!scaling && params) {
    scaling = params;
    holder = "rope_parameters";
  }
  // transformers before 4.43 spelled rope_type "type".
  const std::string type =
      scaling
          ? r.string_or(*scaling, scaling->contains("rope_type") ? "rope_type" : "type", "default")
          : "default";
  if (type != "default" && type != "llama3")
    return r.differs("rope_type", holder, fmt::format("\"{}\"", type),
                     "fsdpgen's rotary positions are unscaled or scaled as llama3",
                     "\"llama3\" or \"default\"");
  r.scaling(holder, type == "llama3" ? scaling->dump() : "absent");
  if (type != "llama3") return;
  constexpr auto scaled = config_key::kind::scaled;
  r.read<double>(*scaling, holder, "factor", "rope_scaling factor", &hf_model::rope_factor, {},
                 scaled);
  r.read<double>(*scaling, holder, "low_freq_factor", "rope_scaling low_freq",
                 &hf_model::rope_low_freq, {}, scaled);
  r.read<double>(*scaling, holder, "high_freq_factor", "rope_scaling high_freq",
                 &hf_model::rope_high_freq, {}, scaled);
  r.read<int64_t>(*scaling, holder, "original_max_position_embeddings",
                  "rope_scaling original_context", &hf_model::rope_original_context, {}, scaled);
}

void read_llama(config_reader& r) {
  const json& c = r.config();
  hf_model& m = r.model;
  r.read<int64_t>(c, "", "hidden_size", "width", &hf_model::width, {});
  r.read<int64_t>(c, "", "num_attention_heads", "heads", &hf_model::heads, {});
  if (m.heads > 0 || r.get(c, "num_key_value_heads"))
    r.read<int64_t>(c, "", "num_key_value_heads", "kv_heads", &hf_model::kv_heads, m.heads);
  const json* head_dim = r.get(c, "head_dim");
  if (head_dim && m.heads > 0 && (!head_dim->is_number_integer() || *head_dim != m.width / m.heads))
    r.differs(
        "head_dim", "", head_dim->dump(),
        fmt::format("fsdpgen's heads are hidden_size / num_attention_heads = {} / {} = {} wide",
                    m.width, m.heads, m.width / m.heads),
        fmt::format("{}", m.width / m.heads));
  r.read<int64_t>(c, "", "intermediate_size", "ffn_hidden", &hf_model::ffn_hidden, {});
  r.read<int64_t>(c, "", "num_hidden_layers", "layers", &hf_model::layers, {});
  r.read<int64_t>(c, "", "vocab_size", "vocab", &hf_model::vocab, {});
  r.read<int64_t>(c, "", "max_position_embeddings", "context", &hf_model::context, 2048,
                  config_key::kind::at_least);
  r.read<double>(c, "", "rms_norm_eps", "norm_eps", &hf_model::norm_eps, 1e-6);
  r.string_is("hidden_act", "silu", "fsdpgen's llama builds SwiGLU with silu");
  r.read<bool>(c, "", "tie_word_embeddings", "tie_embeddings", &hf_model::tied, false);
  r.off("attention_bias", "fsdpgen's llama has no attention biases");
  r.off("mlp_bias", "fsdpgen's llama has no MLP biases");
  if (const json* window = r.get(c, "sliding_window"))
    r.differs("sliding_window", "", window->dump(),
              "fsdpgen's attention sees the whole context, no sliding window", "null");
  read_rope(r);
}

// The keys of the family r.model.llama names.
void read_as_family(config_reader& r) {
  if (!read_family(r)) return;
  if (r.model.llama)
    read_llama(r);
  else
    read_gpt2(r);
}

// The family a config's model_type (else architectures) names; none after
// appending why to *problems.
std::optional<bool> llama_of(const config_reader& r, std::vector<hf_problem>* problems) {
  const std::string known =
      "fsdpgen imports \"gpt2\" (GPT2LMHeadModel) and \"llama\" (LlamaForCausalLM)";
  if (const json* type = r.get(r.config(), "model_type")) {
    if (*type == "gpt2" || *type == "llama") return *type == "llama";
    problems->push_back({"model_type", type->dump(), known});
    return std::nullopt;
  }
  if (const json* arch = r.get(r.config(), "architectures"); arch && arch->is_array())
    for (const json& a : *arch)
      if (a == "GPT2LMHeadModel" || a == "LlamaForCausalLM") return a == "LlamaForCausalLM";
  problems->push_back({"model_type", "absent", known + ", and architectures names neither"});
  return std::nullopt;
}

std::string text_of(int64_t v) {
  return fmt::format("{}", v);
}
std::string text_of(double v) {
  return fmt::format("{}", v);
}
std::string text_of(bool v) {
  return v ? "true" : "false";
}

bool agrees(int64_t config, int64_t spec, bool at_least) {
  return at_least ? config >= spec : config == spec;
}
bool agrees(double config, double spec, bool) {
  return std::abs(config - spec) <= kRelativeTolerance * std::abs(spec);
}
bool agrees(bool config, bool spec, bool) {
  return config == spec;
}

// The model's value of the key, as the spec states it.
std::string spec_value(const config_key& k, const hf_model& m) {
  if (k.how == config_key::kind::scaling) return m.rope_factor > 0 ? "llama3(...)" : "none";
  return std::visit([&](auto field) { return text_of(m.*field); }, k.field);
}

bool agrees(const config_key& k, const hf_model& config, const hf_model& m) {
  if (k.how == config_key::kind::scaling) return (config.rope_factor > 0) == (m.rope_factor > 0);
  return std::visit(
      [&](auto field) {
        return agrees(config.*field, m.*field, k.how == config_key::kind::at_least);
      },
      k.field);
}

// The config at `path` as read, its keys listed by `read`; a named error when
// it cannot be read, is not a JSON object or a key has a wrong type.
template <typename Read>
void read_config(const std::string& path, Read read) {
  const std::string text = file_read_whole(path, kJsonFileMaxBytes);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!config.is_object()) throw std::runtime_error(fmt::format("{}: not a JSON object", path));
  config_reader r(path, std::move(config));
  try {
    read(r);
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: {}", path, e.what()));
  }
}

// 2 x n, or the largest int64_t where that is larger.
int64_t twice_saturated(int64_t n) {
  return n > INT64_MAX / 2 ? INT64_MAX : 2 * n;
}

}  // namespace

// GPT-2's tokenizer's <|endoftext|>, its bos and eos.
constexpr int64_t kGpt2EndOfText = 50256;

hf_special_ids hf_special_ids_by_vocab(const hf_model& m) {
  hf_special_ids ids;
  if (!m.llama && m.vocab > kGpt2EndOfText) ids.bos = ids.eos = kGpt2EndOfText;
  return ids;
}

namespace {

// An id as config.json writes it: the number, or null for none.
json id_or_null(int64_t id, const hf_model* m, const char* key) {
  if (m && id >= m->vocab)
    throw std::logic_error(
        fmt::format("hf_config_text: {} {} is outside the vocabulary of {}", key, id, m->vocab));
  return id >= 0 ? json(id) : json();
}

}  // namespace

std::string hf_config_text(const hf_model& m) {
  return hf_config_text(m, hf_special_ids_by_vocab(m));
}

std::string hf_config_text(const hf_model& m, const hf_special_ids& ids,
                           const std::string& torch_dtype) {
  const json bos = id_or_null(ids.bos, &m, "bos_token_id");
  const json eos = id_or_null(ids.eos, &m, "eos_token_id");
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
          std::max<int64_t>(m.context,
                            m.rope_factor > 0 ? twice_saturated(m.rope_original_context) : 0)},
         {"rms_norm_eps", m.norm_eps},
         {"hidden_act", "silu"},
         {"rope_theta", m.rope_theta},
         {"rope_scaling", nullptr},
         {"tie_word_embeddings", m.tied},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"bos_token_id", bos},
         {"eos_token_id", eos},
         {"torch_dtype", torch_dtype}};
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
         {"bos_token_id", bos},
         {"eos_token_id", eos},
         {"torch_dtype", torch_dtype}};
  }
  return c.dump(2) + "\n";
}

std::string hf_generation_config_text(const hf_special_ids& ids) {
  const json c = {{"bos_token_id", id_or_null(ids.bos, nullptr, "bos_token_id")},
                  {"eos_token_id", id_or_null(ids.eos, nullptr, "eos_token_id")},
                  {"pad_token_id", id_or_null(ids.pad, nullptr, "pad_token_id")}};
  return c.dump(2) + "\n";
}

hf_model hf_model_of_config(const std::string& path, std::vector<hf_problem>* problems) {
  hf_model model;
  read_config(path, [&](config_reader& r) {
    const std::optional<bool> llama = llama_of(r, problems);
    if (!llama) return;
    r.model.llama = *llama;
    read_as_family(r);
    for (const config_key& k : r.keys)
      if (k.how == config_key::kind::differs)
        problems->push_back({k.qualified(), k.text, k.spec_key});
      else if (k.missing)
        problems->push_back({k.qualified(), "absent",
                             fmt::format("fsdpgen needs it for the spec's {}", k.spec_key)});
    model = r.model;
  });
  return model;
}

std::vector<hf_mismatch> hf_config_mismatches(const std::string& path, const hf_model& m) {
  std::vector<hf_mismatch> out;
  read_config(path, [&](config_reader& r) {
    r.model.llama = m.llama;
    read_as_family(r);
    const bool both_scaled = m.rope_factor > 0 && r.model.rope_factor > 0;
    for (const config_key& k : r.keys) {
      if (k.how == config_key::kind::differs)
        out.push_back({k.key, k.text, k.spec_key, k.want, k.unbuildable});
      else if (k.how == config_key::kind::scaled && !both_scaled)
        continue;
      else if (k.missing)
        out.push_back({k.key, k.text, k.spec_key, spec_value(k, m)});
      else if (!agrees(k, r.model, m))
        out.push_back(
            {k.key,
             k.how == config_key::kind::at_least ? k.text + " (shorter than the spec's)" : k.text,
             k.spec_key, spec_value(k, m)});
    }
  });
  return out;
}
