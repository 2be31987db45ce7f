// fsdpgen import-hf and check --hf from the command line: the specs written
// from the config.json of GPT-2, Llama 3.2 1B and the models of llama's
// architecture (Mistral 7B v0.3, SmolLM2 135M, TinyLlama 1.1B, and Qwen2.5
// 0.5B with its q, k and v biases, Qwen3 0.6B with its qk-norm and head_dim,
// Gemma 2B with its embedding scale, (1 + weight) norms and GeGLU, Gemma 3 1B with
// its sandwich norms and alternating layers; tests/cli/hf/,
// as the Hub has them) check, match their configs and have the published
// parameter counts, an edited spec has each difference named at its key, and
// keys and families no spec represents are all named.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/cli/CliHelpers.h"
#include "tests/common/Command.h"

namespace {

using fsdpgen::test::CmdResult;
using fsdpgen::test::file_bytes;
using fsdpgen::test::fresh_dir;
using fsdpgen::test::has;
using fsdpgen::test::run;
using fsdpgen::test::spec;

const std::string kSource = FSDPGEN_SOURCE_DIR;

// fsdpgen run in the source tree, so that the paths it prints are relative.
CmdResult run_in_source(const std::string& args) {
  return fsdpgen::test::run_command(fmt::format("cd {} && {} {}", kSource, FSDPGEN_BIN, args));
}

// A config.json in a fresh directory of that name.
std::string write_config(const std::string& name, const nlohmann::json& config) {
  const std::string dir = fresh_dir(name);
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  return dir;
}

nlohmann::json fixture(const std::string& model) {
  return nlohmann::json::parse(file_bytes(kSource + "/tests/cli/hf/" + model + "/config.json"));
}

// The model's parameter count in `fsdpgen plan`'s output.
std::string planned_params(const CmdResult& plan) {
  std::smatch m;
  return std::regex_search(plan.out, m, std::regex("model: (\\d+) parameters")) ? m[1].str() : "";
}

// The lines of a spec's model section.
std::string model_section(const std::string& spec) {
  const size_t begin = spec.find("\nmodel "), end = spec.find("\n}\n", begin);
  return spec.substr(begin, end - begin);
}

// GPT-2 124M's config gives a spec that checks, matches the config, and has
// the parameters of specs/gpt2-124m.fsdp (whose model also matches it).
TEST(ImportHf, Gpt2RoundTrip) {
  const std::string dir = fresh_dir("import-hf-gpt2");
  const std::string spec = dir + "/gpt2.fsdp";
  CmdResult r = run("import-hf " + kSource + "/tests/cli/hf/gpt2 -o " + spec);
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("check " + spec);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "ok: model gpt2 (gpt2, 124439808 parameters, 12 layers)")) << r.out;
  r = run("check " + spec + " --hf " + kSource + "/tests/cli/hf/gpt2");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, fmt::format("{}: model gpt2 matches {}/tests/cli/hf/gpt2/config.json\n", spec,
                               kSource));
  const CmdResult imported = run("plan " + spec + " --gpu h100-sxm");
  const CmdResult shipped = run("plan " + kSource + "/specs/gpt2-124m.fsdp --gpu h100-sxm");
  EXPECT_EQ(planned_params(imported), "124439808") << imported.out;
  EXPECT_EQ(planned_params(imported), planned_params(shipped)) << shipped.out;
  r = run("check " + kSource + "/specs/gpt2-124m.fsdp --hf " + kSource + "/tests/cli/hf/gpt2");
  EXPECT_EQ(r.status, 0) << r.out;
}

// Llama 3.2 1B's config (rope_scaling llama3, tied, 131072 positions) gives
// the spec in tests/cli/hf/Llama-3.2-1B.fsdp, byte for byte; it checks and
// matches, and specs/llama-1b.fsdp's hand-written model matches it too.
TEST(ImportHf, Llama32WritesTheExpectedSpec) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/Llama-3.2-1B");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/Llama-3.2-1B.fsdp"));
  r = run_in_source("check tests/cli/hf/Llama-3.2-1B.fsdp");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "(llama, 1235814400 parameters, 16 layers)")) << r.out;
  r = run_in_source("check tests/cli/hf/Llama-3.2-1B.fsdp --hf tests/cli/hf/Llama-3.2-1B");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out,
            "tests/cli/hf/Llama-3.2-1B.fsdp: model llama_3_2_1b matches "
            "tests/cli/hf/Llama-3.2-1B/config.json\n");
  r = run_in_source("check specs/llama-1b.fsdp --hf tests/cli/hf/Llama-3.2-1B/config.json");
  EXPECT_EQ(r.status, 0) << r.out;
}

// transformers 5 keeps rope_theta and the scaling in rope_parameters: the
// same model section; a config.json path names the same model as its directory.
TEST(ImportHf, TransformersFiveRopeParametersGiveTheSameModel) {
  nlohmann::json c = fixture("Llama-3.2-1B");
  c["rope_parameters"] = c["rope_scaling"];
  c["rope_parameters"]["rope_theta"] = c["rope_theta"];
  c.erase("rope_scaling");
  c.erase("rope_theta");
  const std::string dir = write_config("Llama-3.2-1B", c);
  const CmdResult v5 = run("import-hf " + dir + "/config.json");
  ASSERT_EQ(v5.status, 0) << v5.out;
  EXPECT_EQ(model_section(v5.out),
            model_section(file_bytes(kSource + "/tests/cli/hf/Llama-3.2-1B.fsdp")));
}

// An edited spec: every difference at once, each at the spec's key, and a
// key the spec leaves to its default at the model's name.
TEST(CheckHf, EditedSpecNamesEveryDifferenceAtItsKey) {
  const std::string dir = fresh_dir("check-hf-edited");
  std::string spec = file_bytes(kSource + "/tests/cli/hf/Llama-3.2-1B.fsdp");
  spec = std::regex_replace(spec, std::regex("layers     = 16"), "layers     = 8");
  spec = std::regex_replace(spec, std::regex("norm_eps   = 1e-05"), "norm_eps   = 1e-06");
  spec = std::regex_replace(spec, std::regex("  kv_heads   = 8\n"), "");
  std::ofstream(dir + "/edited.fsdp") << spec;
  std::filesystem::copy(kSource + "/tests/cli/hf/Llama-3.2-1B/config.json", dir + "/config.json");
  const CmdResult r = fsdpgen::test::run_command(
      fmt::format("cd {} && {} check edited.fsdp --hf .", dir, FSDPGEN_BIN));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out,
            "edited.fsdp:5:7: error: kv_heads is 32 by default, but ./config.json has "
            "num_key_value_heads = 8\n"
            "model llama_3_2_1b {\n"
            "      ^~~~~~~~~~~~\n"
            "note: set kv_heads in the model section to match\n"
            "edited.fsdp:11:16: error: layers = 8, but ./config.json has num_hidden_layers = 16\n"
            "  layers     = 8\n"
            "               ^\n"
            "edited.fsdp:13:16: error: norm_eps = 1e-06, but ./config.json has rms_norm_eps = "
            "1e-05\n"
            "  norm_eps   = 1e-06\n"
            "               ^~~~~\n"
            "3 errors generated.\n");
}

// GPT-2's width and norm_eps changed: both named (and the MLP width, which
// follows the width by default), in one run.
TEST(CheckHf, Gpt2WidthAndNormEps) {
  const std::string dir = fresh_dir("check-hf-gpt2");
  ASSERT_EQ(run("import-hf " + kSource + "/tests/cli/hf/gpt2 -o " + dir + "/gpt2.fsdp").status, 0);
  std::string spec = file_bytes(dir + "/gpt2.fsdp");
  spec = std::regex_replace(spec, std::regex("width      = 768"), "width      = 1536");
  spec = std::regex_replace(spec, std::regex("norm_eps   = 1e-05"), "norm_eps   = 1e-06");
  std::ofstream(dir + "/gpt2.fsdp") << spec;
  const CmdResult r = run("check " + dir + "/gpt2.fsdp --hf " + kSource + "/tests/cli/hf/gpt2");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: width = 1536, but ")) << r.out;
  EXPECT_TRUE(has(r, "/tests/cli/hf/gpt2/config.json has n_embd = 768\n")) << r.out;
  EXPECT_TRUE(has(r, "error: norm_eps = 1e-06, but ")) << r.out;
  EXPECT_TRUE(has(r, "config.json has layer_norm_epsilon = 1e-05\n")) << r.out;
  EXPECT_TRUE(has(r, "error: ffn_hidden is 6144 by default, but ")) << r.out;
  EXPECT_TRUE(has(r, "3 errors generated.")) << r.out;
}

// Keys no spec represents: every one named with its value, no spec written.
TEST(ImportHf, UnbuildableKeysAreAllNamed) {
  const std::string out = fresh_dir("import-hf-unbuildable") + "/x.fsdp";
  const CmdResult r = run_in_source("import-hf tests/cli/hf/unbuildable -o " + out);
  EXPECT_EQ(r.status, 1) << r.out;
  const std::string c = "fsdpgen: error: tests/cli/hf/unbuildable/config.json: ";
  // (head_dim = 128, 2048 / 32 = 64 for hidden_size / heads, is a spec's head_dim.)
  // (hidden_act "gelu" is erf's GELU in llama's config; only Gemma's reads it as the tanh form.)
  EXPECT_EQ(r.out, c +
                       "hidden_act = \"gelu\": fsdpgen's llama builds SwiGLU with silu or GeGLU "
                       "with gelu_pytorch_tanh\n" +
                       c + "attention_bias = true: fsdpgen's llama has no attention biases\n" + c +
                       "mlp_bias = true: fsdpgen's llama has no MLP biases\n" + c +
                       "sliding_window = 4096: 4096 < max_position_embeddings 131072: "
                       "transformers' LlamaForCausalLM ignores sliding_window; a windowed model is "
                       "model_type \"mistral\" (MistralForCausalLM), a spec whose context is at "
                       "most 4096 is this one's plain causal attention\n" +
                       c +
                       "rope_scaling.rope_type = \"yarn\": fsdpgen's rotary positions are "
                       "unscaled or scaled as llama3 or linear\n"
                       "fsdpgen: no spec written: 5 keys of tests/cli/hf/unbuildable/config.json "
                       "describe what fsdpgen does not build\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST(ImportHf, Gpt2KeysOfAnotherModel) {
  nlohmann::json c = fixture("gpt2");
  c["activation_function"] = "relu";
  c["scale_attn_by_inverse_layer_idx"] = true;
  c.erase("n_embd");
  const std::string dir = write_config("import-hf-gpt2-keys", c);
  const CmdResult r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  const std::string path = dir + "/config.json";
  EXPECT_EQ(r.out, fmt::format("fsdpgen: error: {0}: n_embd is absent: fsdpgen needs it for the "
                               "spec's width\n"
                               "fsdpgen: error: {0}: activation_function = \"relu\": fsdpgen's "
                               "gpt2 builds GELU with tanh\n"
                               "fsdpgen: error: {0}: scale_attn_by_inverse_layer_idx = true: "
                               "fsdpgen's gpt2 scales attention by 1 / sqrt(head size) alone\n"
                               "fsdpgen: no spec written: 3 keys of {0} describe what fsdpgen "
                               "does not build\n",
                               path));
}

// A model_type no family of fsdpgen's nor foreign_families knows: the families it imports.
TEST(ImportHf, AnotherFamilyIsNamed) {
  nlohmann::json c = fixture("Llama-3.2-1B");
  c["model_type"] = "phi3";
  const std::string dir = write_config("import-hf-phi3", c);
  const CmdResult r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, fmt::format("fsdpgen: error: {}/config.json: model_type = \"phi3\": "
                                 "fsdpgen imports \"gpt2\" (GPT2LMHeadModel), \"llama\" "
                                 "(LlamaForCausalLM), \"mistral\" (MistralForCausalLM), \"qwen2\" "
                                 "(Qwen2ForCausalLM), \"qwen3\" (Qwen3ForCausalLM), \"olmo2\" "
                                 "(Olmo2ForCausalLM), \"gemma\" (GemmaForCausalLM), \"gemma2\" "
                                 "(Gemma2ForCausalLM), \"gemma3_text\" (Gemma3ForCausalLM)\n",
                                 dir)))
      << r.out;
}

// The configs of llama's architecture as the Hub has them (Mistral's
// model_type "mistral", sliding_window null): each imports, checks, matches
// its config, and plans with the parameters its model card publishes.
// gemma-3-4b-text is the text model of gemma-3-4b-pt (its text_config over
// Gemma3TextConfig's defaults, transformers 4's keys); its count is what
// transformers 5.24 gives Gemma3ForCausalLM of it (the card's 4.3B holds the
// vision tower).
TEST(ImportHf, LlamaArchitecturesHaveTheirPublishedParameters) {
  const std::string dir = fresh_dir("import-hf-llama-shaped");
  for (const auto& [model, name, params] :
       {std::tuple{"Mistral-7B-v0.3", "mistral_7b_v0_3", "7248023552"},
        {"Mistral-7B-v0.1", "mistral_7b_v0_1", "7241732096"},
        {"SmolLM2-135M", "smollm2_135m", "134515008"},
        {"TinyLlama-1.1B-Chat-v1.0", "tinyllama_1_1b_chat_v1_0", "1100048384"},
        {"Qwen2.5-0.5B", "qwen2_5_0_5b", "494032768"},
        {"Qwen3-0.6B", "qwen3_0_6b", "596049920"},
        {"OLMo-2-0425-1B", "olmo_2_0425_1b", "1484916736"},
        {"gemma-2b", "gemma_2b", "2506172416"},
        {"gemma-3-1b-pt", "gemma_3_1b_pt", "999885952"},
        {"gemma-3-4b-text", "gemma_3_4b_text", "3880263168"},
        {"gemma-2-2b", "gemma_2_2b", "2614341888"}}) {
    SCOPED_TRACE(model);
    const std::string config = kSource + "/tests/cli/hf/" + model;
    const std::string spec = dir + "/" + model + ".fsdp";
    CmdResult r = run("import-hf " + config + " -o " + spec);
    ASSERT_EQ(r.status, 0) << r.out;
    r = run("check " + spec);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r, fmt::format("ok: model {} (llama, {} parameters", name, params))) << r.out;
    r = run("check " + spec + " --hf " + config);
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, fmt::format("{}: model {} matches {}/config.json\n", spec, name, config));
    const CmdResult plan = run("plan " + spec + " --gpu h100-sxm");
    EXPECT_EQ(planned_params(plan), params) << plan.out;
  }
  // Mistral's specs, byte for byte: llama's family, MistralForCausalLM named;
  // v0.1's sliding_window of 4096 (of its 32768 positions) kept.
  for (const char* model : {"Mistral-7B-v0.3", "Mistral-7B-v0.1"}) {
    const CmdResult r = run_in_source(std::string("import-hf tests/cli/hf/") + model);
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/" + model + ".fsdp"));
  }
  // specs/mistral-7b-v0.1.fsdp (context 8192, where the window slides) matches it.
  const CmdResult r =
      run_in_source("check specs/mistral-7b-v0.1.fsdp --hf tests/cli/hf/Mistral-7B-v0.1");
  EXPECT_EQ(r.status, 0) << r.out;
}

// Qwen2.5's config: llama with qkv_bias (Qwen2ForCausalLM named), its spec
// byte for byte; a llama spec against it is named at qkv_bias, and the
// Qwen2 spec against Llama's config too.
TEST(ImportHf, Qwen2IsLlamaWithQkvBiases) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/Qwen2.5-0.5B");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/Qwen2.5-0.5B.fsdp"));
  r = run_in_source("check specs/qwen2.5-0.5b.fsdp --hf tests/cli/hf/Qwen2.5-0.5B");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run_in_source("check specs/llama-1b.fsdp --hf tests/cli/hf/Qwen2.5-0.5B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "specs/llama-1b.fsdp:4:7: error: qkv_bias is false by default, but "
                  "tests/cli/hf/Qwen2.5-0.5B/config.json has model_type = \"qwen2\"\n"))
      << r.out;
  r = run_in_source("check specs/qwen2.5-0.5b.fsdp --hf tests/cli/hf/Llama-3.2-1B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "error: qkv_bias = true, but tests/cli/hf/Llama-3.2-1B/config.json has "
                  "model_type = \"llama\"\n"))
      << r.out;
}

// OLMo 2's config: llama with block_norms = post and qk_norm = across_heads
// (Olmo2ForCausalLM named), its spec byte for byte; specs/olmo2-1b.fsdp
// matches it; a Qwen3 spec against it is named at qk_norm and block_norms,
// and the OLMo 2 spec against Llama's config at both too.
TEST(ImportHf, Olmo2IsLlamaWithPostNormsAndQkNormAcrossHeads) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/OLMo-2-0425-1B");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/OLMo-2-0425-1B.fsdp"));
  r = run_in_source("check specs/olmo2-1b.fsdp --hf tests/cli/hf/OLMo-2-0425-1B");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run_in_source("check specs/qwen3-0.6b.fsdp --hf tests/cli/hf/OLMo-2-0425-1B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "error: qk_norm = true, but tests/cli/hf/OLMo-2-0425-1B/config.json has "
                  "model_type = \"olmo2\"\n"))
      << r.out;
  EXPECT_TRUE(has(r,
                  "error: block_norms is pre by default, but "
                  "tests/cli/hf/OLMo-2-0425-1B/config.json has model_type = \"olmo2\"\n"))
      << r.out;
  r = run_in_source("check specs/olmo2-1b.fsdp --hf tests/cli/hf/Llama-3.2-1B");
  EXPECT_EQ(r.status, 1) << r.out;
  for (const char* key : {"qk_norm = across_heads", "block_norms = post"})
    EXPECT_TRUE(has(r, fmt::format("error: {}, but tests/cli/hf/Llama-3.2-1B/config.json has "
                                   "model_type = \"llama\"\n",
                                   key)))
        << r.out;
  // OLMo 2's rms_norm_eps when absent is Olmo2Config's 1e-5, not llama's 1e-6.
  nlohmann::json c = fixture("OLMo-2-0425-1B");
  c.erase("rms_norm_eps");
  r = run("import-hf " + write_config("OLMo-2-no-eps", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "  norm_eps   = 1e-05\n")) << r.out;
}

// Qwen3's config: llama with qk_norm and head_dim 128 (Qwen3ForCausalLM
// named), its spec byte for byte; a llama spec against it is named at
// qk_norm and head_dim, and the Qwen3 spec against Llama's config too.
TEST(ImportHf, Qwen3IsLlamaWithQkNormAndHeadDim) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/Qwen3-0.6B");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/Qwen3-0.6B.fsdp"));
  r = run_in_source("check specs/qwen3-0.6b.fsdp --hf tests/cli/hf/Qwen3-0.6B");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run_in_source("check specs/llama-1b.fsdp --hf tests/cli/hf/Qwen3-0.6B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "specs/llama-1b.fsdp:4:7: error: qk_norm is false by default, but "
                  "tests/cli/hf/Qwen3-0.6B/config.json has model_type = \"qwen3\"\n"))
      << r.out;
  EXPECT_TRUE(has(r,
                  "specs/llama-1b.fsdp:4:7: error: head_dim is 64 by default, but "
                  "tests/cli/hf/Qwen3-0.6B/config.json has head_dim = 128\n"))
      << r.out;
  r = run_in_source("check specs/qwen3-0.6b.fsdp --hf tests/cli/hf/Llama-3.2-1B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "error: qk_norm = true, but tests/cli/hf/Llama-3.2-1B/config.json has "
                  "model_type = \"llama\"\n"))
      << r.out;
  // Qwen3's head_dim when absent is 128, not hidden_size / num_attention_heads.
  nlohmann::json c = fixture("Qwen3-0.6B");
  c.erase("head_dim");
  r = run("check " + kSource + "/specs/qwen3-0.6b.fsdp --hf " + write_config("Qwen3-0.6B", c));
  EXPECT_EQ(r.status, 0) << r.out;
}

// Gemma's config: llama with scale_embedding, norm_plus_one and GeGLU
// (hidden_act "gelu", which transformers' GemmaConfig reads as the tanh
// form), GemmaForCausalLM named, its spec byte for byte; a llama spec against
// it is named at each of the three, and the Gemma spec against Llama's config
// too. Gemma's defaults where keys are absent: tied embeddings, GELU's tanh
// form, head_dim 256; a hidden_act fsdpgen does not build is named.
TEST(ImportHf, GemmaIsLlamaWithItsEmbeddingScaleNormsAndGeGlu) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/gemma-2b");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/gemma-2b.fsdp"));
  r = run_in_source("check specs/gemma-2b.fsdp --hf tests/cli/hf/gemma-2b");
  EXPECT_EQ(r.status, 0) << r.out;
  r = run_in_source("check specs/llama-1b.fsdp --hf tests/cli/hf/gemma-2b");
  EXPECT_EQ(r.status, 1) << r.out;
  for (const char* line :
       {"specs/llama-1b.fsdp:4:7: error: scale_embedding is false by default, but "
        "tests/cli/hf/gemma-2b/config.json has model_type = \"gemma\"\n",
        "specs/llama-1b.fsdp:4:7: error: norm_plus_one is false by default, but "
        "tests/cli/hf/gemma-2b/config.json has model_type = \"gemma\"\n",
        "specs/llama-1b.fsdp:4:7: error: activation is silu by default, but "
        "tests/cli/hf/gemma-2b/config.json has hidden_act = \"gelu\"\n"}) {
    EXPECT_TRUE(has(r, line)) << line << r.out;
  }
  r = run_in_source("check specs/gemma-2b.fsdp --hf tests/cli/hf/Llama-3.2-1B");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "error: scale_embedding = true, but tests/cli/hf/Llama-3.2-1B/config.json has "
                  "model_type = \"llama\"\n"))
      << r.out;
  EXPECT_TRUE(has(r,
                  "error: activation = gelu_tanh, but tests/cli/hf/Llama-3.2-1B/config.json has "
                  "hidden_act = \"silu\"\n"))
      << r.out;
  nlohmann::json c = fixture("gemma-2b");
  for (const char* key : {"hidden_act", "tie_word_embeddings", "head_dim"})
    c.erase(key);
  r = run("check " + kSource + "/specs/gemma-2b.fsdp --hf " + write_config("gemma-2b", c));
  EXPECT_EQ(r.status, 0) << r.out;
  c["hidden_act"] = "relu";
  r = run("import-hf " + write_config("gemma-2b", c));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "hidden_act = \"relu\": fsdpgen's llama builds SwiGLU with silu or GeGLU "
                  "with gelu_pytorch_tanh"))
      << r.out;
}

// Qwen2's window counts only where use_sliding_window is true (as
// transformers' Qwen2Config reads it): off, any sliding_window is plain
// causal attention; on, it slides on the layers from max_window_layers on
// (or those layer_types names): none of them is plain causal attention, all
// of them the spec's sliding_window, some of them refused by name.
TEST(ImportHf, Qwen2WindowCountsOnlyWithUseSlidingWindow) {
  const std::string expected =
      model_section(file_bytes(kSource + "/tests/cli/hf/Qwen2.5-0.5B.fsdp"));
  nlohmann::json c = fixture("Qwen2.5-0.5B");
  c["sliding_window"] = 4096;
  std::string dir = write_config("Qwen2.5-0.5B", c);
  CmdResult r = run("import-hf " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);

  c["use_sliding_window"] = true;  // max_window_layers 24 of 24 layers: none slides
  r = run("import-hf " + write_config("Qwen2.5-0.5B", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);

  c["max_window_layers"] = 0;  // every layer slides
  r = run("import-hf " + write_config("Qwen2.5-0.5B", c));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string windowed = std::regex_replace(
      expected, std::regex("  tie_embeddings"),
      "  sliding_window = 4096   # each query attends the last 4096 positions\n  tie_embeddings");
  EXPECT_EQ(model_section(r.out), windowed);
  c["layer_types"] = std::vector<std::string>(24, "sliding_attention");
  c["max_window_layers"] = 24;  // layer_types, where given, says
  r = run("import-hf " + write_config("Qwen2.5-0.5B", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), windowed);
  c.erase("layer_types");

  c["max_window_layers"] = 12;
  dir = write_config("import-hf-qwen2-window", c);
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, fmt::format("fsdpgen: error: {}/config.json: max_window_layers = 12: 12 of "
                                 "the 24 layers slide in a window of 4096; fsdpgen's "
                                 "sliding_window applies to every layer\n",
                                 dir)))
      << r.out;
  c["sliding_window"] = 32768;
  c["max_window_layers"] = 0;
  dir = write_config("Qwen2.5-0.5B", c);
  r = run("import-hf " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);
  c["use_sliding_window"] = 1;
  dir = write_config("import-hf-qwen2-window-flag", c);
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "\"use_sliding_window\" must be true or false, not 1")) << r.out;
}

// A Mistral window of null or at least the config's positions is plain
// causal attention: the same spec. A shorter one (4096 of Mistral 7B
// v0.1's 32768) is the spec's sliding_window; check --hf compares windows at
// the spec's context, where none and one of at least the context are the
// same. Mistral's defaults stand in for absent keys: 8 kv heads, a window of 4096.
TEST(ImportHf, MistralWindowIsTheSpecsSlidingWindow) {
  const std::string expected =
      model_section(file_bytes(kSource + "/tests/cli/hf/Mistral-7B-v0.3.fsdp"));
  nlohmann::json c = fixture("Mistral-7B-v0.3");
  c["sliding_window"] = 32768;
  c.erase("num_key_value_heads");
  std::string dir = write_config("Mistral-7B-v0.3", c);
  CmdResult r = run("import-hf " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);

  const std::string windowed = std::regex_replace(
      expected, std::regex("  tie_embeddings"),
      "  sliding_window = 4096   # each query attends the last 4096 positions\n  tie_embeddings");
  c["sliding_window"] = 4096;
  r = run("import-hf " + write_config("Mistral-7B-v0.3", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), windowed);
  c.erase("sliding_window");
  dir = write_config("Mistral-7B-v0.3", c);
  r = run("import-hf " + dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), windowed);

  // Without sliding_window at context 2048 (< 4096) the spec matches; at 8192
  // it is named at sliding_window, and with sliding_window = 4096 it matches.
  const std::string spec = kSource + "/tests/cli/hf/Mistral-7B-v0.3.fsdp";
  r = run("check " + spec + " --hf " + dir);
  EXPECT_EQ(r.status, 0) << r.out;
  const std::string dir2 = fresh_dir("check-hf-mistral-window");
  const std::string longer = std::regex_replace(
      file_bytes(spec), std::regex("context    = 2048 .*\n"), "context    = 8192\n");
  std::ofstream(dir2 + "/longer.fsdp") << longer;
  r = run("check " + dir2 + "/longer.fsdp --hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: sliding_window is none by default, but " + dir +
                         "/config.json has sliding_window = 4096 (mistral's default; 4096 < the "
                         "spec's context 8192)\n"))
      << r.out;
  std::ofstream(dir2 + "/windowed.fsdp") << std::regex_replace(
      longer, std::regex("  tie_embeddings"), "  sliding_window = 4096\n  tie_embeddings");
  r = run("check " + dir2 + "/windowed.fsdp --hf " + dir);
  EXPECT_EQ(r.status, 0) << r.out;
  // A window the config does not have is named at the spec's key.
  c["sliding_window"] = nullptr;
  r = run("check " + dir2 + "/windowed.fsdp --hf " + write_config("Mistral-7B-v0.3", c));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: sliding_window = 4096, but ")) << r.out;
  EXPECT_TRUE(has(r, "/config.json has sliding_window = null\n")) << r.out;
}

// Gemma 3's text config (transformers 4's keys, as the Hub has gemma-3-1b-pt):
// llama with Gemma's pieces, sandwich norms, each head's q/k norms and
// alternating layers with their own rotary base, its spec byte for byte; the
// same model in transformers 5's keys (layer_types, rope_parameters per kind
// of layer, hidden_activation's defaults) imports the same model section; a
// llama spec against it is named at each piece. Layer types that are no
// pattern of one global layer in every N are refused by name; Gemma 3's
// multimodal config (a vision tower) names what fsdpgen does not build.
// Gemma 2 2B: its soft-caps (and their defaults, 50 and 30, where absent),
// its spec byte for byte; a query_pre_attn_scalar other than the head size
// is the spec's.
TEST(ImportHf, Gemma3IsLlamaWithSandwichNormsAndAlternatingLayers) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/gemma-3-1b-pt");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/gemma-3-1b-pt.fsdp"));
  const std::string expected = model_section(r.out);
  r = run_in_source("check specs/gemma3-1b.fsdp --hf tests/cli/hf/gemma-3-1b-pt");
  EXPECT_EQ(r.status, 0) << r.out;

  nlohmann::json c = fixture("gemma-3-1b-pt");
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling",
                          "sliding_window_pattern", "hidden_activation"})
    c.erase(key);
  c["rope_parameters"] = {
      {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 26; ++i)
    types.push_back((i + 1) % 6 == 0 ? "full_attention" : "sliding_attention");
  c["layer_types"] = types;
  r = run("import-hf " + write_config("gemma-3-1b-pt", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);

  r = run_in_source("check specs/llama-1b.fsdp --hf tests/cli/hf/gemma-3-1b-pt");
  EXPECT_EQ(r.status, 1) << r.out;
  for (const char* line :
       {"error: block_norms is pre by default, but tests/cli/hf/gemma-3-1b-pt/config.json has "
        "model_type = \"gemma3_text\"\n",
        "error: qk_norm is false by default, but tests/cli/hf/gemma-3-1b-pt/config.json has "
        "model_type = \"gemma3_text\"\n",
        "error: global_every is 0 by default, but tests/cli/hf/gemma-3-1b-pt/config.json has "
        "sliding_window_pattern = 6\n",
        "error: rope_local_theta is 0 by default, but tests/cli/hf/gemma-3-1b-pt/config.json has "
        "rope_local_base_freq = 10000\n"}) {
    EXPECT_TRUE(has(r, line)) << line << r.out;
  }

  types[3] = "full_attention";  // not one global layer in every N
  c["layer_types"] = types;
  r = run("import-hf " + write_config("gemma-3-1b-pt", c));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "fsdpgen's alternating layers are one global in every N (the spec's "
                  "global_every), the last of each N"))
      << r.out;

  r = run_in_source("import-hf tests/cli/hf/gemma-2-2b");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/gemma-2-2b.fsdp"));
  r = run_in_source("check specs/gemma2-2b.fsdp --hf tests/cli/hf/gemma-2-2b");
  EXPECT_EQ(r.status, 0) << r.out;
  c = fixture("gemma-2-2b");
  c.erase("attn_logit_softcapping");
  c.erase("final_logit_softcapping");
  r = run("check " + kSource + "/specs/gemma2-2b.fsdp --hf " + write_config("gemma-2-2b", c));
  EXPECT_EQ(r.status, 0) << r.out;
  c["attn_logit_softcapping"] = nullptr;
  c["query_pre_attn_scalar"] = 144;
  r = run("check " + kSource + "/specs/gemma2-2b.fsdp --hf " + write_config("gemma-2-2b", c));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: attention_softcap = 50, but ")) << r.out;
  EXPECT_TRUE(has(r, "/config.json has attn_logit_softcapping = null\n")) << r.out;
  EXPECT_TRUE(has(r, "/config.json has query_pre_attn_scalar = 144\n")) << r.out;

  c = fixture("gemma-3-1b-pt");
  c["model_type"] = "gemma3";
  r = run("import-hf " + write_config("import-hf-gemma3", c));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r,
                  "model_type = \"gemma3\": Gemma3ForConditionalGeneration is not llama's "
                  "architecture; not supported yet: a vision tower (its text_config is a "
                  "gemma3_text model, which fsdpgen imports: tools/gemma3_text.py saves it "
                  "alone)"))
      << r.out;
}

// Gemma 3 4B's text model: its global layers' rotary frequencies divided by
// 8 (rope_scaling linear) become the spec's rope_scaling = linear(factor =
// 8), its spec byte for byte; transformers 5's rope_parameters (the scaling
// in full_attention) import the same model section; a spec without the
// scaling, or with llama3's, is named at rope_scaling, and another factor at
// factor.
TEST(ImportHf, Gemma3FourBScalesItsGlobalRotaryFrequenciesLinearly) {
  CmdResult r = run_in_source("import-hf tests/cli/hf/gemma-3-4b-text");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, file_bytes(kSource + "/tests/cli/hf/gemma-3-4b-text.fsdp"));
  EXPECT_TRUE(has(r, "  rope_scaling = linear(factor = 8)\n")) << r.out;
  const std::string expected = model_section(r.out);

  nlohmann::json c = fixture("gemma-3-4b-text");
  for (const char* key : {"rope_theta", "rope_local_base_freq", "rope_scaling"})
    c.erase(key);
  c["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  r = run("import-hf " + write_config("gemma-3-4b-text", c));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(model_section(r.out), expected);

  const std::string spec = fresh_dir("import-hf-gemma-3-4b") + "/g.fsdp";
  const std::string config = kSource + "/tests/cli/hf/gemma-3-4b-text";
  auto check_with = [&](const std::string& scaling) {
    std::string text = file_bytes(kSource + "/tests/cli/hf/gemma-3-4b-text.fsdp");
    const std::string line = "  rope_scaling = linear(factor = 8)\n";
    text.replace(text.find(line), line.size(), scaling);
    std::ofstream(spec) << text;
    return run("check " + spec + " --hf " + config);
  };
  const std::string linear =
      "/config.json has rope_scaling = {\"factor\":8.0,\"rope_type\":\"linear\"}\n";
  r = check_with("");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: rope_scaling is none by default, but ")) << r.out;
  EXPECT_TRUE(has(r, linear)) << r.out;
  r = check_with(
      "  rope_scaling = llama3(factor = 8, low_freq = 1, high_freq = 4, original_context = "
      "8192)\n");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: rope_scaling = llama3(...), but ")) << r.out;
  EXPECT_TRUE(has(r, linear)) << r.out;
  r = check_with("  rope_scaling = linear(factor = 4)\n");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "error: rope_scaling factor = 4, but ")) << r.out;
  EXPECT_TRUE(has(r, "/config.json has factor = 8.0\n")) << r.out;
  r = check_with("  rope_scaling = linear(factor = 8)\n");
  EXPECT_EQ(r.status, 0) << r.out;
}

// Files that cannot be read as a config: a named error, exit 1, never a crash.
TEST(ImportHf, UnreadableConfigsAreNamedErrors) {
  const std::string dir = fresh_dir("import-hf-malformed");
  const std::string path = dir + "/config.json";
  CmdResult r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path + ": cannot open")) << r.out;
  std::ofstream(path) << "{\"model_type\": \"llama\",";
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path + ": not JSON")) << r.out;
  std::ofstream(path) << "[1, 2]";
  r = run("import-hf " + path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path + ": not a JSON object")) << r.out;
  nlohmann::json c = fixture("Llama-3.2-1B");
  c["hidden_size"] = "2048";
  c["rope_scaling"] = "llama3";
  std::ofstream(path) << c.dump();
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path +
                         ": \"hidden_size\" must be an integer (at least 1), not \"2048\"\n"))
      << r.out;
  c["hidden_size"] = 2048;
  std::ofstream(path) << c.dump();
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(
      has(r, "fsdpgen: error: " + path + ": \"rope_scaling\" must be an object, not \"llama3\"\n"))
      << r.out;
  r = run("check " + kSource + "/specs/llama-1b.fsdp --hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path)) << r.out;
  // More heads than width and no head_dim: no head size (the fuzzer's find:
  // read as head_dim 0, written back as "head_dim": 0, which no reader takes).
  nlohmann::json narrow = fixture("Llama-3.2-1B");
  narrow["hidden_size"] = 38;
  narrow["num_attention_heads"] = 94;
  narrow.erase("head_dim");
  std::ofstream(path) << narrow.dump();
  r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: " + path +
                         ": \"num_attention_heads\" 94 is more than \"hidden_size\" 38 and no "
                         "\"head_dim\" is given: each head would have hidden_size / "
                         "num_attention_heads = 0 values\n"))
      << r.out;
  // Gemma 2's and 3's keys of the wrong kind, each named with the config's path.
  for (const auto& [key, value, why] :
       {std::tuple{"layer_types", nlohmann::json("x"),
                   "\"layer_types\" must be a list of \"full_attention\" and "
                   "\"sliding_attention\", not \"x\""},
        std::tuple{"sliding_window_pattern", nlohmann::json(0),
                   "\"sliding_window_pattern\" must be an integer (at least 1), not 0"},
        std::tuple{"attn_logit_softcapping", nlohmann::json(0),
                   "\"attn_logit_softcapping\" must be positive or null, not 0"},
        std::tuple{"query_pre_attn_scalar", nlohmann::json(-3),
                   "\"query_pre_attn_scalar\" must be positive, not -3"},
        std::tuple{"rope_parameters", nlohmann::json{{"full_attention", 5}},
                   "\"rope_parameters.full_attention\" must be an object, not 5"}}) {
    nlohmann::json g = fixture("gemma-3-1b-pt");
    g[key] = value;
    std::ofstream(path) << g.dump();
    r = run("import-hf " + dir);
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_TRUE(has(r, "fsdpgen: error: " + path + ": " + why + "\n")) << r.out;
  }
}

// -o naming the config it reads is refused; the config stays as it was.
TEST(ImportHf, RefusesToOverwriteTheConfig) {
  const std::string dir = write_config("import-hf-overwrite", fixture("gpt2"));
  const std::string before = file_bytes(dir + "/config.json");
  const CmdResult r = run("import-hf " + dir + " -o " + dir + "/./config.json");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "fsdpgen: error: -o " + dir +
                         "/./config.json: that is the config.json read; write the spec to "
                         "another file"))
      << r.out;
  EXPECT_EQ(file_bytes(dir + "/config.json"), before);
}

}  // namespace
