// HfFilesTest: Hugging Face model directories. safetensors_set opens one
// file, a directory or an index into one view of every tensor (each shard's
// header read once) with an error naming the file for every inconsistent
// index; hf_config_mismatches names each key of a config.json that differs
// from the model (transformers 4's rope_scaling and 5's rope_parameters
// alike), and malformed configs are errors naming the file and the key.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/files/hf_config.h"
#include "runtime/files/safetensors.h"
#include "runtime/files/safetensors_set.h"
#include "tests/common/ExpectError.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path fresh_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("fsdpgen_hf_" + std::to_string(getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A safetensors file of F32 tensors, each filled with `fill` + its element index.
void write_tensors(const fs::path& path, const std::vector<safetensors_entry>& entries,
                   float fill) {
  const safetensors_layout layout = safetensors_plan(entries, "F32", {{"format", "pt"}});
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  safetensors_write_header(fd, path.string(), layout);
  for (const safetensors_tensor& t : layout.tensors) {
    std::vector<float> v(static_cast<size_t>(t.elems()));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = fill + static_cast<float>(i);
    safetensors_write(fd, path.string(), t, 0, t.elems(), v.data());
  }
  ::close(fd);
}

// Two shards (a, b in the first; c in the second) and their index.
fs::path sharded_dir(const std::string& name) {
  const fs::path d = fresh_dir(name);
  write_tensors(d / "model-00001-of-00002.safetensors", {{"a", {2, 3}}, {"b", {4}}}, 10);
  write_tensors(d / "model-00002-of-00002.safetensors", {{"c", {5}}}, 20);
  const json index = {{"metadata", {{"total_size", (6 + 4 + 5) * 4}}},
                      {"weight_map",
                       {{"a", "model-00001-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(d / "model.safetensors.index.json") << index.dump(2);
  return d;
}

float first_value(const safetensors_set& s, const std::string& name) {
  auto [file, t] = s.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return 0;
  float v = 0;
  safetensors_read(*file, *t, 0, 1, &v);
  return v;
}

TEST(SafetensorsSet, OpensADirectoryItsIndexOrOneFile) {
  const fs::path d = sharded_dir("set");
  for (const fs::path& p : {d, d / "model.safetensors.index.json"}) {
    const safetensors_set s = safetensors_set_open(p.string());
    EXPECT_EQ(s.files.size(), 2u) << "each shard once";
    EXPECT_EQ(s.tensor_count(), 3u);
    EXPECT_EQ(first_value(s, "a"), 10.0f);
    EXPECT_EQ(first_value(s, "c"), 20.0f);
    EXPECT_EQ(s.find("b").second->shape, (std::vector<int64_t>{4}));
    EXPECT_EQ(s.find("missing").second, nullptr);
    EXPECT_EQ(s.dir, d.string());
  }
  const safetensors_set one =
      safetensors_set_open((d / "model-00002-of-00002.safetensors").string());
  EXPECT_EQ(one.tensor_count(), 1u);
  EXPECT_TRUE(one.dir.empty()) << "a file alone is not a model directory";
  const fs::path single = fresh_dir("single");
  write_tensors(single / "model.safetensors", {{"x", {3}}}, 1);
  EXPECT_EQ(first_value(safetensors_set_open(single.string()), "x"), 1.0f);
}

TEST(SafetensorsSet, InconsistentIndexesAreErrorsNamingTheFile) {
  const fs::path d = sharded_dir("bad");
  const std::string index = (d / "model.safetensors.index.json").string();
  auto rewrite = [&](const json& j) { std::ofstream(index) << j.dump(); };
  json good = json::parse(std::ifstream(index));

  json missing_file = good;
  missing_file["weight_map"]["c"] = "model-00009-of-00002.safetensors";
  rewrite(missing_file);
  expect_error([&] { safetensors_set_open(d.string()); },
               {index, "tensor 'c'", "model-00009-of-00002.safetensors"});

  json wrong_place = good;
  wrong_place["weight_map"]["c"] = "model-00001-of-00002.safetensors";
  rewrite(wrong_place);
  expect_error([&] { safetensors_set_open(d.string()); },
               {index, "tensor 'c' is mapped to", "has no such tensor"});

  json wrong_total = good;
  wrong_total["metadata"]["total_size"] = 12;
  rewrite(wrong_total);
  expect_error([&] { safetensors_set_open(d.string()); },
               {index, "metadata.total_size is 12, but its tensors hold 60 bytes"});

  rewrite(json{{"metadata", json::object()}});
  expect_error([&] { safetensors_set_open(d.string()); }, {index, "no \"weight_map\""});
  std::ofstream(index) << "{ not json";
  expect_error([&] { safetensors_set_open(d.string()); }, {index, "not JSON"});

  const fs::path empty = fresh_dir("empty");
  expect_error([&] { safetensors_set_open(empty.string()); },
               {empty.string(), "a directory without model.safetensors.index.json"});
}

// Llama 3.2 1B's shape, as the spec's model would give it.
hf_model llama_1b() {
  hf_model m;
  m.llama = true;
  m.vocab = 128256;
  m.context = 2048;
  m.width = 2048;
  m.heads = 32;
  m.kv_heads = 8;
  m.layers = 16;
  m.ffn_hidden = 8192;
  m.tied = true;
  m.norm_eps = 1e-5;
  m.rope_theta = 500000;
  m.rope_factor = 32;
  m.rope_low_freq = 1;
  m.rope_high_freq = 4;
  m.rope_original_context = 8192;
  return m;
}

// Llama 3.2 1B's config.json as transformers 4 writes it (rope_scaling).
json llama_1b_config() {
  return json{{"model_type", "llama"},
              {"hidden_size", 2048},
              {"num_attention_heads", 32},
              {"num_key_value_heads", 8},
              {"head_dim", 64},
              {"intermediate_size", 8192},
              {"num_hidden_layers", 16},
              {"vocab_size", 128256},
              {"max_position_embeddings", 131072},
              {"rms_norm_eps", 1e-5},
              {"hidden_act", "silu"},
              {"rope_theta", 500000.0},
              {"rope_scaling",
               {{"rope_type", "llama3"},
                {"factor", 32.0},
                {"low_freq_factor", 1.0},
                {"high_freq_factor", 4.0},
                {"original_max_position_embeddings", 8192}}},
              {"tie_word_embeddings", true},
              {"attention_bias", false},
              {"mlp_bias", false}};
}

std::vector<hf_mismatch> mismatches(const json& config, const hf_model& m) {
  const fs::path d = fresh_dir("config");
  std::ofstream(d / "config.json") << config.dump(2);
  return hf_config_mismatches((d / "config.json").string(), m);
}

std::vector<std::string> keys_of(const std::vector<hf_mismatch>& v) {
  std::vector<std::string> keys;
  for (const hf_mismatch& m : v)
    keys.push_back(m.config_key);
  return keys;
}

TEST(HfConfig, Llama32MatchesInEitherTransformersSpelling) {
  EXPECT_EQ(keys_of(mismatches(llama_1b_config(), llama_1b())), std::vector<std::string>{});
  json v5 = llama_1b_config();  // transformers 5: theta and scaling in rope_parameters
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 32.0},          {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  EXPECT_EQ(keys_of(mismatches(v5, llama_1b())), std::vector<std::string>{});
}

TEST(HfConfig, EachDifferenceIsNamedWithBothValues) {
  json c = llama_1b_config();
  c["num_key_value_heads"] = 4;
  c["rope_scaling"]["factor"] = 8.0;
  c["max_position_embeddings"] = 1024;  // shorter than the spec's context
  c["mlp_bias"] = true;
  c["hidden_act"] = "gelu";
  c.erase("tie_word_embeddings");  // llama's default: untied
  const std::vector<hf_mismatch> got = mismatches(c, llama_1b());
  EXPECT_EQ(keys_of(got),
            (std::vector<std::string>{"num_key_value_heads", "max_position_embeddings",
                                      "hidden_act", "tie_word_embeddings", "mlp_bias", "factor"}));
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0].config_value, "4");
  EXPECT_EQ(got[0].spec_key, "kv_heads");
  EXPECT_EQ(got[0].spec_value, "8");
  EXPECT_EQ(got[3].config_value, "absent (false)");
  hf_model unscaled = llama_1b();
  unscaled.rope_factor = 0;
  EXPECT_EQ(keys_of(mismatches(llama_1b_config(), unscaled)),
            std::vector<std::string>{"rope_scaling"});
}

// The config.json written for a model with qkv_bias is Qwen2's (its class,
// no window) and reads back as the model; read as Llama's it differs at
// model_type, which states the biases, and Llama's config differs from it there.
TEST(HfConfig, Qwen2IsWrittenAndReadAsLlamaWithQkvBias) {
  hf_model m = llama_1b();
  m.rope_factor = 0;
  m.qkv_bias = true;
  const json c = json::parse(hf_config_text(m));
  EXPECT_EQ(c["model_type"], "qwen2");
  EXPECT_EQ(c["architectures"], json::array({"Qwen2ForCausalLM"}));
  EXPECT_EQ(c["use_sliding_window"], false);
  EXPECT_FALSE(c.contains("attention_bias"));
  EXPECT_EQ(keys_of(mismatches(c, m)), std::vector<std::string>{});
  hf_model plain = m;
  plain.qkv_bias = false;
  const std::vector<hf_mismatch> got = mismatches(c, plain);
  ASSERT_EQ(keys_of(got), std::vector<std::string>{"model_type"});
  EXPECT_EQ(got[0].spec_key, "qkv_bias");
  EXPECT_EQ(got[0].config_value, "\"qwen2\"");
  EXPECT_EQ(got[0].spec_value, "false");
  json llama = llama_1b_config();
  llama.erase("rope_scaling");
  EXPECT_EQ(keys_of(mismatches(llama, m)), std::vector<std::string>{"model_type"});
}

// Linear scaling (rope_type "linear": the factor alone) is written as
// transformers writes it, in rope_scaling for a llama and in rope_parameters'
// full_attention for Gemma 3's text model (its local layers unscaled), and
// reads back as the model; a llama3-scaled or unscaled model differs from it at
// rope_scaling (the other's keys not compared), another factor at factor.
TEST(HfConfig, LinearScalingIsWrittenAndReadBack) {
  hf_model m = llama_1b();
  m.rope_theta = 1e6;
  m.rope_factor = 8;
  m.rope_linear = true;
  json c = json::parse(hf_config_text(m));
  EXPECT_EQ(c["rope_scaling"], (json{{"rope_type", "linear"}, {"factor", 8.0}}));
  EXPECT_EQ(c["max_position_embeddings"], 2048);
  EXPECT_EQ(keys_of(mismatches(c, m)), std::vector<std::string>{});
  hf_model llama3 = llama_1b();
  llama3.rope_theta = 1e6;
  EXPECT_EQ(keys_of(mismatches(c, llama3)), std::vector<std::string>{"rope_scaling"});
  hf_model other = m;
  other.rope_factor = 4;
  EXPECT_EQ(keys_of(mismatches(c, other)), std::vector<std::string>{"factor"});

  hf_model gemma3 = m;
  gemma3.qk_norm = gemma3.sandwich_norm = gemma3.scale_embedding = gemma3.norm_plus_one = true;
  gemma3.gelu_gate = true;
  gemma3.global_every = 6;
  gemma3.window = 512;
  gemma3.rope_local_theta = 10000;
  c = json::parse(hf_config_text(gemma3));
  ASSERT_EQ(c["model_type"], "gemma3_text");
  EXPECT_FALSE(c.contains("rope_scaling"));
  EXPECT_EQ(c["rope_parameters"]["full_attention"],
            (json{{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}));
  EXPECT_EQ(c["rope_parameters"]["sliding_attention"],
            (json{{"rope_type", "default"}, {"rope_theta", 10000.0}}));
  EXPECT_EQ(keys_of(mismatches(c, gemma3)), std::vector<std::string>{});
  gemma3.rope_factor = 0;
  EXPECT_EQ(keys_of(mismatches(c, gemma3)),
            std::vector<std::string>{"rope_parameters.full_attention"});
}

TEST(HfConfig, Gpt2) {
  hf_model m;
  m.vocab = 50257;
  m.context = 1024;
  m.width = 768;
  m.heads = 12;
  m.kv_heads = 12;
  m.layers = 12;
  m.ffn_hidden = 3072;
  const json gpt2 = {{"model_type", "gpt2"},
                     {"n_embd", 768},
                     {"n_head", 12},
                     {"n_layer", 12},
                     {"n_inner", nullptr},
                     {"vocab_size", 50257},
                     {"n_positions", 1024},
                     {"layer_norm_epsilon", 1e-5},
                     {"activation_function", "gelu_new"}};
  EXPECT_EQ(keys_of(mismatches(gpt2, m)), std::vector<std::string>{});
  m.llama = true;
  EXPECT_EQ(mismatches(gpt2, m).at(0).config_key, "model_type") << "a gpt2 config, a llama model";
}

// config.json's bos and eos are ids of the vocabulary or null, never
// transformers' family defaults beyond it: GPT-2's <|endoftext|> for GPT-2's
// vocabulary (and one padded past it), null for a byte-level 256 and for
// llama (whose tokenizer a spec does not name); each config still matches.
TEST(HfConfig, BosAndEosAreInTheVocabularyOrNull) {
  hf_model m;
  m.context = 64;
  m.width = 64;
  m.heads = 4;
  m.kv_heads = 4;
  m.layers = 2;
  m.ffn_hidden = 256;
  for (auto [llama, vocab, id] : {std::tuple{false, 50257, json(50256)},
                                  {false, 50304, json(50256)},
                                  {false, 256, json()},
                                  {false, 50256, json()},
                                  {true, 256, json()},
                                  {true, 128256, json()}}) {
    m.llama = llama;
    m.vocab = vocab;
    const json c = json::parse(hf_config_text(m));
    EXPECT_EQ(c.at("bos_token_id"), id) << vocab;
    EXPECT_EQ(c.at("eos_token_id"), id) << vocab;
    EXPECT_EQ(keys_of(mismatches(c, m)), std::vector<std::string>{}) << vocab;
  }
}

// Found by tests/fuzz/HfConfigFuzz.cpp: an n_embd beyond 2^61 has no 4 x
// n_embd for n_inner's default (n_inner is then missing), and a llama3
// original context beyond 2^62 writes the largest max_position_embeddings
// (both were signed overflows).
TEST(HfConfig, HugeValuesMakeNoOverflowingDefaults) {
  const fs::path d = fresh_dir("huge");
  const std::string path = (d / "config.json").string();
  const json config = {{"model_type", "gpt2"},
                       {"n_embd", int64_t{1} << 62},
                       {"n_head", 1},
                       {"n_layer", 1},
                       {"vocab_size", 5}};
  std::ofstream(path) << config.dump();
  std::vector<hf_problem> problems;
  hf_model_of_config(path, &problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].key, "n_inner");
  EXPECT_EQ(problems[0].value, "absent");
  hf_model m = llama_1b();
  m.rope_original_context = INT64_MAX;
  EXPECT_EQ(json::parse(hf_config_text(m))["max_position_embeddings"], INT64_MAX);
}

TEST(HfConfig, MalformedConfigsAreErrorsNamingFileAndKey) {
  const fs::path d = fresh_dir("malformed");
  const std::string path = (d / "config.json").string();
  std::ofstream(path) << "[1, 2";
  expect_error([&] { hf_config_mismatches(path, llama_1b()); }, {path, "not JSON"});
  std::ofstream(path) << "[1, 2]";
  expect_error([&] { hf_config_mismatches(path, llama_1b()); }, {path, "not a JSON object"});
  json c = llama_1b_config();
  c["hidden_size"] = "2048";
  std::ofstream(path) << c.dump();
  expect_error([&] { hf_config_mismatches(path, llama_1b()); },
               {path, "\"hidden_size\" must be an integer"});
  expect_error([&] { hf_config_mismatches((d / "none.json").string(), llama_1b()); },
               {"none.json: cannot open", "No such file"});
}

}  // namespace
