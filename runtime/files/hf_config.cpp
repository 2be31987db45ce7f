// hf_config: config.json's keys read into a model, family by family, in one
// list that both the reading and the comparison with another model walk.
#include "runtime/files/hf_config.h"
#include "runtime/files/file_io.h"
#include "runtime/model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace {

namespace model = fsdpgen::model;

using json = nlohmann::json;

constexpr double kRelativeTolerance = 1e-6;

// The member of hf_model a key states.
using model_field = std::variant<int64_t hf_model::*, double hf_model::*, bool hf_model::*>;

// One key of a config as read, in the order the families list them.
struct config_key {
  enum class kind {
    equal,     // the model's value
    at_least,  // positions: at least the model's context
    scaling,   // rope scaling: none, llama3's or linear's, as the model's
    scaled,    // a value of the scaling: compared when both scale alike
    differs,   // a value fsdpgen does not build, or another family's model_type
    window,    // sliding_window: the same window at the model's context (none or at least it: none)
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

// The model_types whose configs are llama's architecture, each with its LM
// class and transformers' defaults where they are not llama's. The first is
// llama's own.
struct llama_type {
  const char* model_type;
  const char* lm;
  int64_t positions;  // max_position_embeddings when absent
  int64_t kv_heads;   // num_key_value_heads when absent; 0: num_attention_heads
  int64_t window;     // sliding_window when absent (null is none); 0: none
  // The key that turns the window on (sliding_window is read only where it
  // is true, and then slides on the layers from max_window_layers on, or
  // those layer_types names); null: sliding_window alone says, for every layer.
  const char* window_switch = nullptr;
  bool qkv_bias = false;  // the architecture has biases on q, k and v
  bool qk_norm = false;   // the architecture norms each head's q and k
  int64_t head_dim = 0;   // head_dim when absent; 0: hidden_size / num_attention_heads
  // Whether transformers' class applies sliding_window (LlamaForCausalLM
  // ignores it: fsdpgen then refuses a window that would matter).
  bool slides = true;
  bool qk_norm_across_heads = false;  // the architecture norms all of q and all of k
  bool post_norm = false;             // the architecture's norms follow its sub-blocks
  double norm_eps = 1e-6;             // rms_norm_eps when absent
  // Gemma's architecture: the embedding scaled by sqrt(hidden_size), RMSNorms
  // by (1 + weight); tied embeddings and GELU's tanh form by default, and
  // hidden_act "gelu" read as that form (transformers' GemmaConfig does).
  bool gemma = false;
  // Gemma 2's and 3's: norms before and after each sub-block; the layers
  // alternate, one in every `global_every` global (layer_types, else
  // sliding_window_pattern, when absent), the others local; the local
  // layers' rotary base when absent (0: they share rope_theta); rope_theta
  // when absent; the activation's key (hidden_activation).
  bool sandwich = false;
  int64_t global_every = 0;
  double local_theta = 0;
  double rope_theta = 10000.0;
  const char* activation_key = "hidden_act";
  // attn_logit_softcapping and final_logit_softcapping when absent (0: none).
  double attn_softcap = 0, final_softcap = 0;
};
constexpr llama_type kLlamaTypes[] = {
    {"llama", "LlamaForCausalLM", 2048, 0, 0, nullptr, false, false, 0, false},
    {"mistral", "MistralForCausalLM", 131072, 8, 4096},
    {"qwen2", "Qwen2ForCausalLM", 32768, 32, 4096, "use_sliding_window", true},
    {"qwen3", "Qwen3ForCausalLM", 32768, 32, 4096, "use_sliding_window", false, true, 128},
    {"olmo2", "Olmo2ForCausalLM", 2048, 0, 0, nullptr, false, true, 0, false, true, true, 1e-5},
    {"gemma", "GemmaForCausalLM", 8192, 16, 0, nullptr, false, false, 256, false, false, false,
     1e-6, true},
    {.model_type = "gemma2",
     .lm = "Gemma2ForCausalLM",
     .positions = 8192,
     .kv_heads = 4,
     .window = 4096,
     .head_dim = 256,
     .norm_eps = 1e-6,
     .gemma = true,
     .sandwich = true,
     .global_every = 2,
     .activation_key = "hidden_activation",
     .attn_softcap = 50.0,
     .final_softcap = 30.0},
    {.model_type = "gemma3_text",
     .lm = "Gemma3ForCausalLM",
     .positions = 131072,
     .kv_heads = 4,
     .window = 4096,
     .qk_norm = true,
     .head_dim = 256,
     .norm_eps = 1e-6,
     .gemma = true,
     .sandwich = true,
     .global_every = 6,
     .local_theta = 10000.0,
     .rope_theta = 1000000.0,
     .activation_key = "hidden_activation"},
};
// Qwen2's and Qwen3's max_window_layers when absent.
constexpr int64_t kMaxWindowLayers = 28;

// The families transformers builds that fsdpgen does not (yet), each with
// what of it fsdpgen cannot represent: one owner, so that a family fsdpgen
// learns loses its row (or its features) here. A feature is named when the
// family always has it, or when its key says so.
struct foreign_feature {
  enum class when {
    always,
    set,           // the key is present and neither null nor false
    not_head_dim,  // the key is a number other than head_dim (else the head size)
  };
  when applies;
  const char* key;  // "" for always
  const char* what;
};
struct foreign_family {
  const char* model_type;
  const char* lm;
  std::vector<foreign_feature> features;
};

const std::vector<foreign_family>& foreign_families() {
  using w = foreign_feature::when;
  static const std::vector<foreign_family> families = {
      {"gemma3",
       "Gemma3ForConditionalGeneration",
       {{w::always, "",
         "a vision tower (its text_config is a gemma3_text model, which fsdpgen imports: "
         "tools/gemma3_text.py saves it alone)"}}},
  };
  return families;
}

// A config's keys read with their types checked: the model they state and
// the list of keys, in order.
class config_reader {
 public:
  config_reader(std::string path, json config) : path_(std::move(path)), c_(std::move(config)) {}

  hf_model model;
  std::vector<config_key> keys;
  const llama_type* type = &kLlamaTypes[0];  // llama's: its defaults

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
  // Which scaling is there (`text`: the object, or "absent").
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
  // A boolean key: false where absent.
  bool flag(const std::string& key) const {
    const json* v = get(c_, key);
    return v && value<bool>(*v, key);
  }
  // A named error: the config's path and `what`.
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(fmt::format("{}: {}", path_, what));
  }
  // A feature fsdpgen does not build must be off (false or absent).
  void off(const std::string& key, const std::string& why) {
    if (flag(key)) differs(key, "", "true", why, "false");
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

// The row of kLlamaTypes whose model_type is `type`, or whose LM class the
// architectures list `classes` holds; null when none is.
const llama_type* llama_type_named(const json& type) {
  for (const llama_type& t : kLlamaTypes)
    if (type == t.model_type) return &t;
  return nullptr;
}
const llama_type* llama_type_of_classes(const json& classes) {
  if (classes.is_array())
    for (const llama_type& t : kLlamaTypes)
      if (std::find(classes.begin(), classes.end(), t.lm) != classes.end()) return &t;
  return nullptr;
}
const foreign_family* foreign_family_named(const json& type) {
  for (const foreign_family& f : foreign_families())
    if (type == f.model_type) return &f;
  return nullptr;
}

// The families fsdpgen imports, for a model_type it does not.
std::string known_families() {
  std::string llama_types;
  for (const llama_type& t : kLlamaTypes)
    llama_types += fmt::format(", \"{}\" ({})", t.model_type, t.lm);
  return fmt::format("fsdpgen imports \"gpt2\" (GPT2LMHeadModel){}", llama_types);
}

// A whole positive integer of the config, or 0.
int64_t positive_integer(const json& c, const char* key) {
  const auto it = c.find(key);
  return it != c.end() && it->is_number_integer() && *it > 0 ? it->get<int64_t>() : 0;
}

// What of family `f` the config `c` has that fsdpgen cannot represent, in one line.
std::string foreign_why(const foreign_family& f, const json& c) {
  using w = foreign_feature::when;
  const int64_t width = positive_integer(c, "hidden_size");
  const int64_t heads = positive_integer(c, "num_attention_heads");
  const int64_t head_size = heads > 0 && width % heads == 0 ? width / heads : 0;
  const int64_t head_dim = positive_integer(c, "head_dim");
  std::vector<std::string> named;
  for (const foreign_feature& x : f.features) {
    if (x.applies == w::always) {
      named.push_back(x.what);
      continue;
    }
    const auto it = c.find(x.key);
    if (it == c.end() || it->is_null() || *it == false) continue;
    const int64_t head = head_dim > 0 ? head_dim : head_size;
    if (x.applies == w::set)
      named.push_back(fmt::format("{} ({} = {})", x.what, x.key, it->dump()));
    else if (x.applies == w::not_head_dim && head > 0 && *it != head)
      named.push_back(fmt::format("{} ({}, not the head size {})", x.what, it->dump(), head));
  }
  return fmt::format("{} is not llama's architecture; not supported yet: {}", f.lm,
                     fmt::join(named, "; "));
}

// model_type, and architectures when given, as the family's (for llama: one
// of kLlamaTypes, whose defaults r.type then holds); false when model_type
// names another (its keys are then not the family's to read).
bool read_family(config_reader& r) {
  const json& c = r.config();
  const json* type = r.get(c, "model_type");
  const json* arch = r.get(c, "architectures");
  if (r.model.llama && type)
    r.type = llama_type_named(*type);
  else if (const llama_type* t = r.model.llama && arch ? llama_type_of_classes(*arch) : nullptr)
    r.type = t;
  const std::string family = r.model.llama ? "llama" : "gpt2";
  if (type && (r.model.llama ? !r.type : *type != "gpt2")) {
    if (const foreign_family* f = foreign_family_named(*type))
      r.differs("model_type", "", type->dump(), foreign_why(*f, c), fmt::format("\"{}\"", family));
    else
      r.differs("model_type", "", type->dump(), "family", family, false);
    return false;
  }
  const std::string name = r.model.llama ? r.type->model_type : "gpt2";
  const std::string lm = r.model.llama ? r.type->lm : "GPT2LMHeadModel";
  if (arch && !(arch->is_array() && std::find(arch->begin(), arch->end(), lm) != arch->end()))
    r.differs("architectures", "", arch->dump(), fmt::format("fsdpgen's {} is {}", name, lm),
              fmt::format("[\"{}\"]", lm));
  r.model.lm_class = lm;
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

// Gemma 3's local layers' rotary base: rope_parameters' sliding_attention
// object's rope_theta (transformers 5; `local`), else rope_local_base_freq,
// unscaled; the type's default where absent.
void read_local_rope(config_reader& r, const json* local) {
  if (r.type->local_theta == 0) return;
  const std::string holder = "rope_parameters.sliding_attention";
  if (!local)
    return r.read<double>(r.config(), "", "rope_local_base_freq", "rope_local_theta",
                          &hf_model::rope_local_theta, r.type->local_theta);
  if (!local->is_object())
    r.fail(fmt::format("\"{}\" must be an object, not {}", holder, local->dump()));
  const std::string type = r.string_or(*local, "rope_type", "default");
  if (type != "default")
    return r.differs("rope_type", holder, fmt::format("\"{}\"", type),
                     "fsdpgen's local layers' rotary positions are unscaled", "\"default\"");
  r.read<double>(*local, holder, "rope_theta", "rope_local_theta", &hf_model::rope_local_theta,
                 r.type->local_theta);
}

// rope_theta and rope_scaling (transformers 4) or rope_parameters (5; Gemma
// 3's holds one object per kind of layer, the global layers' read here):
// unscaled, llama3's four keys, or linear's factor (Gemma 3 4B and larger).
void read_rope(config_reader& r) {
  const json* params = r.object("rope_parameters");
  const json* scaling = r.object("rope_scaling");
  std::string holder = "rope_scaling", params_holder = "rope_parameters";
  const json* local = nullptr;
  if (params && params->contains("full_attention")) {
    local = r.get(*params, "sliding_attention");
    params = r.get(*params, "full_attention");
    params_holder = "rope_parameters.full_attention";
    if (params && !params->is_object())
      r.fail(fmt::format("\"{}\" must be an object, not {}", params_holder, params->dump()));
  }
  read_local_rope(r, local);
  const bool theta_in_params = params && r.get(*params, "rope_theta");
  r.read<double>(theta_in_params ? *params : r.config(), theta_in_params ? params_holder : "",
                 "rope_theta", "rope_theta", &hf_model::rope_theta, r.type->rope_theta);
  if (!scaling && params) {
    scaling = params;
    holder = params_holder;
  }
  // transformers before 4.43 spelled rope_type "type".
  const std::string type =
      scaling
          ? r.string_or(*scaling, scaling->contains("rope_type") ? "rope_type" : "type", "default")
          : "default";
  if (type != "default" && type != "llama3" && type != "linear")
    return r.differs("rope_type", holder, fmt::format("\"{}\"", type),
                     "fsdpgen's rotary positions are unscaled or scaled as llama3 or linear",
                     "\"llama3\", \"linear\" or \"default\"");
  r.scaling(holder, type == "default" ? "absent" : scaling->dump());
  if (type == "default") return;
  r.model.rope_linear = type == "linear";
  constexpr auto scaled = config_key::kind::scaled;
  r.read<double>(*scaling, holder, "factor", "rope_scaling factor", &hf_model::rope_factor, {},
                 scaled);
  if (type == "linear") return;
  r.read<double>(*scaling, holder, "low_freq_factor", "rope_scaling low_freq",
                 &hf_model::rope_low_freq, {}, scaled);
  r.read<double>(*scaling, holder, "high_freq_factor", "rope_scaling high_freq",
                 &hf_model::rope_high_freq, {}, scaled);
  r.read<int64_t>(*scaling, holder, "original_max_position_embeddings",
                  "rope_scaling original_context", &hf_model::rope_original_context, {}, scaled);
}

// Which of a Qwen2 or Qwen3 config's layers slide, once use_sliding_window
// is true: layer_types where given, else those from max_window_layers on.
// None: no window; all: the window; some: a key fsdpgen cannot build (its
// window is every layer's).
void read_window_layers(config_reader& r, config_key& window) {
  const json& c = r.config();
  int64_t sliding = 0, layers = r.model.layers;
  std::string key, text;
  if (const json* types = r.get(c, "layer_types"); types && types->is_array()) {
    layers = static_cast<int64_t>(types->size());
    sliding = std::count(types->begin(), types->end(), "sliding_attention");
    key = "layer_types";
    text = fmt::format("{} of {} \"sliding_attention\"", sliding, layers);
  } else {
    int64_t from = kMaxWindowLayers;
    if (const json* v = r.get(c, "max_window_layers")) {
      if (!v->is_number_integer())
        r.fail("\"max_window_layers\" must be an integer, not " + v->dump());
      from = v->get<int64_t>();
    }
    sliding = std::max<int64_t>(0, layers - std::max<int64_t>(0, from));
    key = "max_window_layers";
    text = fmt::format("{}", from);
  }
  if (sliding == 0) {
    window.text += fmt::format(" (no layer slides: {} = {})", key, text);
    r.model.window = 0;
  } else if (sliding < layers) {
    r.differs(key, "", text,
              fmt::format("{} of the {} layers slide in a window of {}; fsdpgen's sliding_window "
                          "applies to every layer",
                          sliding, layers, r.model.window),
              "every layer or none");
  }
}

// sliding_window: null is none; absent is the type's default (Mistral's
// 4096); off where the type's switch (Qwen2's use_sliding_window) is not
// true, and then on the layers read_window_layers says. One key always, so
// that a spec's window is compared with a config that has none.
void read_window(config_reader& r) {
  const json& c = r.config();
  const bool switched_on = !r.type->window_switch || r.flag(r.type->window_switch);
  const bool null_window = c.contains("sliding_window") && c["sliding_window"].is_null();
  constexpr auto how = config_key::kind::window;
  if (switched_on && (r.get(c, "sliding_window") || (!null_window && r.type->window > 0))) {
    r.read<int64_t>(c, "", "sliding_window", "sliding_window", &hf_model::window, r.type->window,
                    how);
    if (r.type->window_switch) read_window_layers(r, r.keys.back());
    return;
  }
  std::string text = null_window ? "null" : "absent (null)";
  if (!switched_on)
    text = fmt::format("{} ({} is not true)",
                       r.get(c, "sliding_window") ? c["sliding_window"].dump() : "null",
                       r.type->window_switch);
  r.keys.push_back({.how = how,
                    .key = "sliding_window",
                    .text = text,
                    .spec_key = "sliding_window",
                    .field = &hf_model::window});
}

// Gemma 2's and 3's alternating layers as one global in every N
// (global_every): layer_types (transformers 5), else sliding_window_pattern
// (Gemma 3's before it), else the type's N; all sliding is 0 (every layer
// the window). Types that are no such pattern are refused.
void read_layer_pattern(config_reader& r) {
  if (r.type->global_every == 0) return;
  const json& c = r.config();
  int64_t every = r.type->global_every;
  std::string key = "sliding_window_pattern", text;
  if (const json* types = r.get(c, "layer_types")) {
    if (!types->is_array())
      r.fail(
          "\"layer_types\" must be a list of \"full_attention\" and \"sliding_attention\", "
          "not " +
          types->dump());
    key = "layer_types";
    std::vector<bool> global;
    for (const json& t : *types) {
      if (t != "full_attention" && t != "sliding_attention")
        return r.differs(key, "", t.dump(),
                         "fsdpgen's layers are \"full_attention\" or \"sliding_attention\"",
                         "\"full_attention\" or \"sliding_attention\"");
      global.push_back(t == "full_attention");
    }
    const auto first = std::find(global.begin(), global.end(), true);
    every = first == global.end() ? 0 : (first - global.begin()) + 1;
    for (size_t i = 0; i < global.size(); ++i)
      if (global[i] == model::windowed_layer(every, static_cast<int64_t>(i)))
        return r.differs(key, "", types->dump(),
                         "fsdpgen's alternating layers are one global in every N (the spec's "
                         "global_every), the last of each N",
                         every > 0 ? fmt::format("one \"full_attention\" in every {}", every)
                                   : std::string("no \"full_attention\""));
    if (static_cast<int64_t>(global.size()) != r.model.layers)
      return r.differs(key, "", fmt::format("{} entries", global.size()),
                       fmt::format("one per layer ({})", r.model.layers),
                       fmt::format("{} entries", r.model.layers));
    text = fmt::format("{} of {} \"full_attention\"",
                       std::count(global.begin(), global.end(), true), global.size());
  } else if (const json* p = r.get(c, "sliding_window_pattern")) {
    if (!p->is_number_integer() || p->get<int64_t>() < 1)
      r.fail("\"sliding_window_pattern\" must be an integer (at least 1), not " + p->dump());
    every = p->get<int64_t>();
    text = p->dump();
  } else {
    text = fmt::format("absent ({})", every);
  }
  r.model.global_every = every;
  r.keys.push_back(
      {.key = key, .text = text, .spec_key = "global_every", .field = &hf_model::global_every});
}

// Gemma 2's and 3's attention and head: attn_logit_softcapping and
// final_logit_softcapping (null: none; the type's default where absent, 50
// and 30 for Gemma 2), and query_pre_attn_scalar (256 where absent; the head
// size is that size's scale, as none). Other llama types have none of them,
// which model_type states.
void read_gemma_attention(config_reader& r) {
  const json& c = r.config();
  hf_model& m = r.model;
  const json* type = r.get(c, "model_type");
  const std::string type_text =
      type ? type->dump() : fmt::format("absent ({})", r.type->model_type);
  const std::pair<const char*, double hf_model::*> keys[] = {
      {"attention_softcap", &hf_model::attention_softcap},
      {"logit_softcap", &hf_model::logit_softcap},
      {"query_pre_attn_scalar", &hf_model::query_pre_attn_scalar}};
  if (!r.type->sandwich) {
    for (auto [spec_key, field] : keys)
      r.keys.push_back(
          {.key = "model_type", .text = type_text, .spec_key = spec_key, .field = field});
    return;
  }
  for (auto [key, spec_key, field, fallback] :
       {std::tuple{"attn_logit_softcapping", "attention_softcap", &hf_model::attention_softcap,
                   r.type->attn_softcap},
        std::tuple{"final_logit_softcapping", "logit_softcap", &hf_model::logit_softcap,
                   r.type->final_softcap}}) {
    if (c.contains(key) && c[key].is_null()) {  // none
      r.keys.push_back({.key = key, .text = "null", .spec_key = spec_key, .field = field});
      continue;
    }
    r.read<double>(c, "", key, spec_key, field, fallback);
    if (r.get(c, key) && m.*field <= 0)  // a given cap (the defaults are positive or none)
      r.fail(fmt::format("\"{}\" must be positive or null, not {}", key, m.*field));
  }
  r.read<double>(c, "", "query_pre_attn_scalar", "query_pre_attn_scalar",
                 &hf_model::query_pre_attn_scalar, 256.0);
  if (m.query_pre_attn_scalar <= 0)
    r.fail(
        fmt::format("\"query_pre_attn_scalar\" must be positive, not {}", m.query_pre_attn_scalar));
  if (m.query_pre_attn_scalar == static_cast<double>(m.head_dim)) m.query_pre_attn_scalar = 0;
}

// hidden_act: SiLU (SwiGLU) or GELU's tanh form (GeGLU; Gemma's "gelu" is
// that form too), the spec's activation.
void read_activation(config_reader& r) {
  const std::string fallback = r.type->gemma ? "gelu_pytorch_tanh" : "silu";
  // Gemma 2's and 3's key (hidden_activation), else hidden_act.
  std::string key = r.type->activation_key;
  if (!r.get(r.config(), key)) key = "hidden_act";
  const json* v = r.get(r.config(), key);
  if (v && !v->is_string())
    return r.differs(key, "", v->dump(), "fsdpgen's llama builds silu or gelu_pytorch_tanh",
                     "\"silu\"");
  const std::string act = v ? v->get<std::string>() : fallback;
  const bool tanh_gelu = act == "gelu_pytorch_tanh" || (r.type->gemma && act == "gelu");
  if (!tanh_gelu && act != "silu")
    return r.differs(key, "", v->dump(),
                     "fsdpgen's llama builds SwiGLU with silu or GeGLU with gelu_pytorch_tanh",
                     "\"silu\" or \"gelu_pytorch_tanh\"");
  r.model.gelu_gate = tanh_gelu;
  r.keys.push_back({.key = key,
                    .text = v ? v->dump() : fmt::format("absent (\"{}\")", fallback),
                    .spec_key = "activation",
                    .field = &hf_model::gelu_gate});
}

void read_llama(config_reader& r) {
  const json& c = r.config();
  hf_model& m = r.model;
  r.read<int64_t>(c, "", "hidden_size", "width", &hf_model::width, {});
  r.read<int64_t>(c, "", "num_attention_heads", "heads", &hf_model::heads, {});
  if (m.heads > 0 || r.get(c, "num_key_value_heads"))
    r.read<int64_t>(c, "", "num_key_value_heads", "kv_heads", &hf_model::kv_heads,
                    r.type->kv_heads > 0 ? r.type->kv_heads : m.heads);
  // The type's default (Qwen3's 128), else hidden_size / num_attention_heads,
  // which is no head size where the heads outnumber the width.
  if (!r.get(c, "head_dim") && r.type->head_dim == 0 && m.width > 0 && m.heads > m.width)
    r.fail(
        fmt::format("\"num_attention_heads\" {} is more than \"hidden_size\" {} and no "
                    "\"head_dim\" is given: each head would have hidden_size / "
                    "num_attention_heads = 0 values",
                    m.heads, m.width));
  if (m.heads > 0 || r.get(c, "head_dim"))
    r.read<int64_t>(c, "", "head_dim", "head_dim", &hf_model::head_dim,
                    r.type->head_dim > 0 ? r.type->head_dim
                    : m.heads > 0        ? m.width / m.heads
                                         : 0);
  r.read<int64_t>(c, "", "intermediate_size", "ffn_hidden", &hf_model::ffn_hidden, {});
  r.read<int64_t>(c, "", "num_hidden_layers", "layers", &hf_model::layers, {});
  r.read<int64_t>(c, "", "vocab_size", "vocab", &hf_model::vocab, {});
  r.read<int64_t>(c, "", "max_position_embeddings", "context", &hf_model::context,
                  r.type->positions, config_key::kind::at_least);
  r.read<double>(c, "", "rms_norm_eps", "norm_eps", &hf_model::norm_eps, r.type->norm_eps);
  read_activation(r);
  r.read<bool>(c, "", "tie_word_embeddings", "tie_embeddings", &hf_model::tied, r.type->gemma);
  r.off("attention_bias", "fsdpgen's llama has no attention biases");
  r.off("mlp_bias", "fsdpgen's llama has no MLP biases");
  // The architecture the type names states qkv_bias (Qwen2's biases on q, k
  // and v), qk_norm (Qwen3's norms on each head's q and k, OLMo 2's across
  // heads) and block_norms (OLMo 2's after each sub-block).
  m.qkv_bias = r.type->qkv_bias;
  m.qk_norm = r.type->qk_norm;
  m.qk_norm_across_heads = r.type->qk_norm_across_heads;
  m.post_norm = r.type->post_norm;
  m.scale_embedding = m.norm_plus_one = r.type->gemma;
  m.sandwich_norm = r.type->sandwich;
  const json* type = r.get(c, "model_type");
  for (auto [spec_key, field] :
       {std::pair{"qkv_bias", &hf_model::qkv_bias}, std::pair{"qk_norm", &hf_model::qk_norm},
        std::pair{"qk_norm", &hf_model::qk_norm_across_heads},
        std::pair{"block_norms", &hf_model::post_norm},
        std::pair{"block_norms", &hf_model::sandwich_norm},
        std::pair{"scale_embedding", &hf_model::scale_embedding},
        std::pair{"norm_plus_one", &hf_model::norm_plus_one}})
    r.keys.push_back({.key = "model_type",
                      .text = type ? type->dump() : fmt::format("absent ({})", r.type->model_type),
                      .spec_key = spec_key,
                      .field = field});
  read_window(r);
  read_layer_pattern(r);
  read_rope(r);
  read_gemma_attention(r);
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
// appending why to *problems: what fsdpgen cannot represent of a family it
// knows (foreign_families), else the families it imports.
std::optional<bool> llama_of(const config_reader& r, std::vector<hf_problem>* problems) {
  const json& c = r.config();
  if (const json* type = r.get(c, "model_type")) {
    if (*type == "gpt2" || llama_type_named(*type)) return *type != "gpt2";
    const foreign_family* f = foreign_family_named(*type);
    problems->push_back({"model_type", type->dump(), f ? foreign_why(*f, c) : known_families()});
    return std::nullopt;
  }
  if (const json* arch = r.get(c, "architectures"); arch && arch->is_array()) {
    if (std::find(arch->begin(), arch->end(), "GPT2LMHeadModel") != arch->end()) return false;
    if (llama_type_of_classes(*arch)) return true;
  }
  problems->push_back(
      {"model_type", "absent", known_families() + ", and architectures names none of them"});
  return std::nullopt;
}

// Why a window shorter than the config's own positions makes no spec: its
// class does not apply it.
std::string window_why(const config_reader& r) {
  return fmt::format(
      "{} < max_position_embeddings {}: transformers' {} ignores sliding_window; a windowed model "
      "is model_type \"mistral\" (MistralForCausalLM), a spec whose context is at most {} is this "
      "one's plain causal attention",
      r.model.window, r.model.context, r.type->lm, r.model.window);
}

// The window attention runs with at `context`: 0 where none or at least it.
int64_t window_at(int64_t window, int64_t context) {
  return window < context ? window : 0;
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

// The model's rotary scaling by its spec name: none, llama3 or linear.
std::string scaling_name(const hf_model& m) {
  return m.rope_factor <= 0 ? "none" : m.rope_linear ? "linear" : "llama3";
}

// The model's value of the key, as the spec states it.
std::string spec_value(const config_key& k, const hf_model& m) {
  if (k.how == config_key::kind::scaling)
    return m.rope_factor > 0 ? scaling_name(m) + "(...)" : "none";
  if (k.how == config_key::kind::window) return m.window > 0 ? text_of(m.window) : "none";
  if (k.spec_key == "qk_norm") return m.qk_norm_across_heads ? "across_heads" : text_of(m.qk_norm);
  if (k.spec_key == "block_norms")
    return m.post_norm ? "post" : m.sandwich_norm ? "sandwich" : "pre";
  if (k.spec_key == "activation") return m.gelu_gate ? "gelu_tanh" : "silu";
  return std::visit([&](auto field) { return text_of(m.*field); }, k.field);
}

bool agrees(const config_key& k, const hf_model& config, const hf_model& m) {
  if (k.how == config_key::kind::scaling) return scaling_name(config) == scaling_name(m);
  if (k.how == config_key::kind::window)
    return window_at(config.window, m.context) == window_at(m.window, m.context);
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

// The rotary scaling as transformers writes it (rope_scaling, or in
// rope_parameters beside rope_theta): its rope_type and keys.
json rope_scaling_json(const hf_model& m) {
  if (m.rope_factor <= 0) return {{"rope_type", "default"}};
  if (m.rope_linear) return {{"rope_type", "linear"}, {"factor", m.rope_factor}};
  return {{"rope_type", "llama3"},
          {"factor", m.rope_factor},
          {"low_freq_factor", m.rope_low_freq},
          {"high_freq_factor", m.rope_high_freq},
          {"original_max_position_embeddings", m.rope_original_context}};
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

const char* hf_model_type(const hf_model& m) {
  if (!m.llama) return "gpt2";
  // Gemma's pieces with others' are refused; Gemma 3's q/k norms come with sandwich norms.
  if (m.scale_embedding) return !m.sandwich_norm ? "gemma" : m.qk_norm ? "gemma3_text" : "gemma2";
  if (m.post_norm) return "olmo2";  // with qk_norm across heads
  if (m.qk_norm) return "qwen3";    // qk_norm with qkv_bias is refused
  if (m.qkv_bias) return "qwen2";
  return m.window > 0 ? "mistral" : "llama";
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
         {"head_dim", m.head_dim > 0 ? m.head_dim : m.width / m.heads},
         {"intermediate_size", m.ffn_hidden},
         {"num_hidden_layers", m.layers},
         {"vocab_size", m.vocab},
         {"max_position_embeddings",
          std::max<int64_t>(m.context, m.rope_factor > 0 && !m.rope_linear
                                           ? twice_saturated(m.rope_original_context)
                                           : 0)},
         {"rms_norm_eps", m.norm_eps},
         {"hidden_act", m.gelu_gate ? "gelu_pytorch_tanh" : "silu"},
         {"rope_theta", m.rope_theta},
         {"rope_scaling", nullptr},
         {"tie_word_embeddings", m.tied},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"bos_token_id", bos},
         {"eos_token_id", eos},
         {"torch_dtype", torch_dtype}};
    // Qwen2's and Qwen3's window: on every layer (max_window_layers 0), or none.
    const json qwen_window = {{"use_sliding_window", m.window > 0},
                              {"sliding_window", m.window > 0 ? json(m.window) : json()},
                              {"max_window_layers", m.window > 0 ? 0 : m.layers}};
    const std::string type = hf_model_type(m);
    c["model_type"] = type;
    if (type == "mistral") {  // Mistral's architecture: its window
      c["architectures"] = {"MistralForCausalLM"};
      c.erase("attention_bias");
      c.erase("mlp_bias");
      c["sliding_window"] = m.window;
    }
    if (type == "qwen2") {  // Qwen2's architecture: its biases
      c["architectures"] = {"Qwen2ForCausalLM"};
      c.erase("attention_bias");
      c.erase("mlp_bias");
      c.update(qwen_window);
    }
    if (type == "qwen3") {  // Qwen3's architecture: its norms, no biases
      c["architectures"] = {"Qwen3ForCausalLM"};
      c.erase("mlp_bias");
      c.update(qwen_window);
    }
    if (type == "olmo2") {  // OLMo 2's architecture: its norms, no biases, no window
      c["architectures"] = {"Olmo2ForCausalLM"};
      c.erase("mlp_bias");
    }
    if (type == "gemma") {  // Gemma's architecture: its embedding scale and norms
      c["architectures"] = {"GemmaForCausalLM"};
      c.erase("mlp_bias");
    }
    if (type == "gemma2" || type == "gemma3_text") {  // and norms before and after each
      c["architectures"] = {type == "gemma2" ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM"};
      c.erase("mlp_bias");
      c.erase("hidden_act");
      c["hidden_activation"] = m.gelu_gate ? "gelu_pytorch_tanh" : "silu";
      // A whole number, as transformers' Gemma configs type it (hf_model_unstated
      // refuses another).
      c["query_pre_attn_scalar"] = m.query_pre_attn_scalar != 0
                                       ? json(static_cast<int64_t>(m.query_pre_attn_scalar))
                                       : c["head_dim"];
      c["attn_logit_softcapping"] = m.attention_softcap != 0 ? json(m.attention_softcap) : json();
      c["final_logit_softcapping"] = m.logit_softcap != 0 ? json(m.logit_softcap) : json();
      // The layers: one in every global_every global, the others the window
      // (every layer where global_every is 0; a window of at least the
      // context is the model's positions, as plain causal attention).
      c["sliding_window"] = m.window > 0 ? m.window : c["max_position_embeddings"].get<int64_t>();
      json types = json::array();
      for (int64_t i = 0; i < m.layers; ++i)
        types.push_back(model::windowed_layer(m.global_every, i) ? "sliding_attention"
                                                                 : "full_attention");
      c["layer_types"] = types;
      if (type == "gemma3_text") {  // a rotary base per kind of layer
        c.erase("rope_theta");
        c.erase("rope_scaling");
        json full = rope_scaling_json(m);
        full["rope_theta"] = m.rope_theta;
        c["rope_parameters"] = {
            {"full_attention", full},
            {"sliding_attention",
             {{"rope_type", "default"},
              {"rope_theta", m.rope_local_theta != 0 ? m.rope_local_theta : m.rope_theta}}}};
      }
    }
    if (m.rope_factor > 0 && type != "gemma3_text") c["rope_scaling"] = rope_scaling_json(m);
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
      else if (k.how == config_key::kind::window && !r.type->slides &&
               !agrees(k, r.model, hf_model{.context = r.model.context}))
        problems->push_back({k.qualified(), k.text, window_why(r)});
    model = r.model;
  });
  return model;
}

std::vector<hf_mismatch> hf_config_mismatches(const std::string& path, const hf_model& given) {
  hf_model m = given;  // a head_dim of 0 is width / heads
  if (m.head_dim == 0 && m.heads > 0) m.head_dim = m.width / m.heads;
  std::vector<hf_mismatch> out;
  read_config(path, [&](config_reader& r) {
    r.model.llama = m.llama;
    read_as_family(r);
    const bool both_scaled = m.rope_factor > 0 && scaling_name(r.model) == scaling_name(m);
    for (const config_key& k : r.keys) {
      if (k.how == config_key::kind::differs)
        out.push_back({k.key, k.text, k.spec_key, k.want, k.unbuildable});
      else if (k.how == config_key::kind::scaled && !both_scaled)
        continue;
      else if (k.missing)
        out.push_back({k.key, k.text, k.spec_key, spec_value(k, m)});
      else if (k.how == config_key::kind::window && !agrees(k, r.model, m))
        out.push_back(
            {k.key,
             r.model.window > 0
                 ? fmt::format("{} ({}{} {} the spec's context {})", r.model.window,
                               k.text.starts_with("absent")
                                   ? fmt::format("{}'s default; ", r.type->model_type)
                                   : "",
                               r.model.window, r.model.window < m.context ? "<" : ">=", m.context)
                 : k.text,
             k.spec_key, spec_value(k, m)});
      else if (!agrees(k, r.model, m) &&
               std::none_of(out.begin(), out.end(), [&](const hf_mismatch& d) {
                 return d.config_key == k.key && d.spec_key == k.spec_key;
               }))  // qk_norm: model_type states it twice (whether, and its span)
        out.push_back(
            {k.key,
             k.how == config_key::kind::at_least ? k.text + " (shorter than the spec's)" : k.text,
             k.spec_key, spec_value(k, m)});
    }
  });
  return out;
}
