// libFuzzer target for Hugging Face config.json files: the input as a config,
// read into a model (hf_model_of_config) and checked against fixed gpt2 and
// llama models (hf_config_mismatches). A bad config must be a
// std::runtime_error; a config read without problems must match the model it
// was read into, and that model's own config.json must match it, else we abort.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/files/hf_config.h"
#include "tests/fuzz/Fuzz.h"

namespace {

hf_model gpt2() {
  hf_model m;
  m.vocab = 50257, m.context = 1024, m.width = 768, m.heads = 12, m.kv_heads = 12, m.layers = 12;
  m.ffn_hidden = 3072;
  return m;
}

hf_model llama(bool scaled) {
  hf_model m;
  m.llama = true, m.tied = false, m.norm_eps = 1e-5, m.rope_theta = 500000;
  m.vocab = 64, m.context = 16, m.width = 32, m.heads = 4, m.kv_heads = 2, m.layers = 3;
  m.ffn_hidden = 88;
  if (scaled) {
    m.rope_factor = 8, m.rope_low_freq = 1, m.rope_high_freq = 4;
    m.rope_original_context = 8;
  }
  return m;
}

void check_matches(const std::string& path, const hf_model& m, const char* what) {
  try {
    const std::vector<hf_mismatch> mismatches = hf_config_mismatches(path, m);
    if (mismatches.empty()) return;
    const hf_mismatch& x = mismatches.front();
    fuzz::broken(std::string(what) + ": " + x.config_key + " = " + x.config_value + ", but " +
                 x.spec_key + " = " + x.spec_value);
  } catch (const std::runtime_error& e) {
    fuzz::broken(std::string(what) + ": " + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("config.json", data, size);
  for (const hf_model& m : {gpt2(), llama(false), llama(true)}) {
    try {
      for (const hf_mismatch& x : hf_config_mismatches(path, m))
        fuzz::check(!x.config_key.empty() && !x.spec_key.empty(), "a mismatch names its keys");
    } catch (const std::runtime_error&) {
    }
  }
  std::vector<hf_problem> problems;
  hf_model m;
  try {
    m = hf_model_of_config(path, &problems);
  } catch (const std::runtime_error&) {
    return 0;
  }
  if (!problems.empty()) return 0;
  check_matches(path, m, "a config read without problems matches its model");
  const std::string text = hf_config_text(m);
  check_matches(fuzz::write_file("written.json", text.data(), text.size()), m,
                "a model's config.json matches it");
  return 0;
}
