// fsdpgen import-hf and check --hf from the command line: the specs written
// from GPT-2's and Llama 3.2 1B's config.json (tests/cli/hf/, as transformers
// wrote them) check and match their configs, an edited spec has each
// difference named at its key, and keys no spec represents are all named.
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
  EXPECT_EQ(r.out, c +
                       "head_dim = 128: fsdpgen's heads are hidden_size / num_attention_heads = "
                       "2048 / 32 = 64 wide\n" +
                       c + "hidden_act = \"gelu\": fsdpgen's llama builds SwiGLU with silu\n" + c +
                       "attention_bias = true: fsdpgen's llama has no attention biases\n" + c +
                       "mlp_bias = true: fsdpgen's llama has no MLP biases\n" + c +
                       "sliding_window = 4096: fsdpgen's attention sees the whole context, no "
                       "sliding window\n" +
                       c +
                       "rope_scaling.rope_type = \"yarn\": fsdpgen's rotary positions are "
                       "unscaled or scaled as llama3\n"
                       "fsdpgen: no spec written: 6 keys of tests/cli/hf/unbuildable/config.json "
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

TEST(ImportHf, AnotherFamilyIsNamed) {
  nlohmann::json c = fixture("Llama-3.2-1B");
  c["model_type"] = "mistral";
  const std::string dir = write_config("import-hf-mistral", c);
  const CmdResult r = run("import-hf " + dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, fmt::format("fsdpgen: error: {}/config.json: model_type = \"mistral\": "
                                 "fsdpgen imports \"gpt2\" (GPT2LMHeadModel) and \"llama\" "
                                 "(LlamaForCausalLM)\n",
                                 dir)))
      << r.out;
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
