// HfSpec: the spec text a config.json's model gets (import-hf and its flags),
// and the differences between a spec and a config.json as diagnostics at
// the spec's keys.
#include "codegen/cli/HfSpec.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "codegen/cli/Common.h"
#include "codegen/emit/Build.h"
#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"
#include "dsl/Frontend.h"
#include "dsl/Literals.h"
#include "dsl/Parser.h"

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

// The longest context an imported spec trains at: a model that takes more
// positions (Llama 3.2's 131072) keeps them, and the spec says so.
constexpr int64_t kImportContext = 2048;
// Tokens per rank per micro-batch of an imported spec.
constexpr int64_t kImportMicroBatchTokens = 8192;

// SOURCE's config.json: DIR/config.json for a directory, else SOURCE itself.
std::string config_path_of(const std::string& source) {
  std::error_code ec;
  return fs::is_directory(source, ec) ? (fs::path(source) / "config.json").string() : source;
}

// The model's name: its directory's, as an identifier (Llama-3.2-1B: llama_3_2_1b).
std::string model_name_of(const std::string& config) {
  std::error_code ec;
  const std::string dir = fs::absolute(config, ec).parent_path().filename().string();
  std::string name;
  for (char c : dir) {
    const bool word = std::isalnum(static_cast<unsigned char>(c));
    if (word)
      name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    else if (!name.empty() && name.back() != '_')
      name += '_';
  }
  while (!name.empty() && name.back() == '_')
    name.pop_back();
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) name = "hf_" + name;
  return name == "hf_" ? "imported" : name;
}

// A whole spec for the model: its model section, and defaults to edit for the rest.
std::string spec_text(const hf_model& m, const std::string& source, const std::string& config) {
  const std::string name = model_name_of(config);
  const std::string family = m.llama ? "llama" : "gpt2";
  const std::string positions = m.llama ? "max_position_embeddings" : "n_positions";
  const int64_t context = std::min(m.context, kImportContext);
  std::error_code ec;
  const std::string weights =
      fs::is_directory(source, ec) ? source : fs::path(config).parent_path().string();
  std::string s = fmt::format(
      "# {}: {} of {}, written by\n"
      "# `fsdpgen import-hf`: the model section is the config's; units, parallel and\n"
      "# train are defaults to edit (8 ranks, synthetic tokens: point data at token\n"
      "# files). Start from the weights with ./train --init-from {}\n",
      name, m.lm_class, config, weights.empty() ? "." : weights);
  s += fmt::format("model {} {{\n", name);
  s += fmt::format("  family     = {}\n", family);
  s += fmt::format("  vocab      = {}\n", m.vocab);
  s += fmt::format("  context    = {}{}\n", context,
                   context < m.context
                       ? fmt::format("   # the model takes {} = {} positions", positions, m.context)
                       : "");
  s += fmt::format("  width      = {}\n", m.width);
  s += fmt::format("  heads      = {}\n", m.heads);
  if (m.llama) s += fmt::format("  kv_heads   = {}\n", m.kv_heads);
  s += fmt::format("  layers     = {}\n", m.layers);
  if (m.llama || m.ffn_hidden != 4 * m.width) s += fmt::format("  ffn_hidden = {}\n", m.ffn_hidden);
  s += fmt::format("  norm_eps   = {}\n", format_real(m.norm_eps));
  if (m.llama) s += fmt::format("  rope_theta = {}\n", format_real(m.rope_theta));
  if (m.rope_factor > 0 && m.rope_linear)
    s += fmt::format("  rope_scaling = linear(factor = {})\n", format_real(m.rope_factor));
  else if (m.rope_factor > 0)
    s += fmt::format(
        "  rope_scaling = llama3(factor = {}, low_freq = {}, high_freq = {}, original_context = "
        "{})\n",
        format_real(m.rope_factor), format_real(m.rope_low_freq), format_real(m.rope_high_freq),
        m.rope_original_context);
  if (m.qkv_bias) s += "  qkv_bias   = true   # biases on q, k and v (Qwen2)\n";
  if (m.qk_norm)
    s += m.qk_norm_across_heads
             ? "  qk_norm    = across_heads   # RMSNorm on all of q and all of k (OLMo 2)\n"
             : "  qk_norm    = true   # RMSNorm on each head's q and k (Qwen3)\n";
  if (m.post_norm) s += "  block_norms = post   # norms after attention and the MLP (OLMo 2)\n";
  if (m.sandwich_norm)
    s += "  block_norms = sandwich   # norms before and after attention and the MLP (Gemma 2, 3)\n";
  if (m.scale_embedding)
    s += "  scale_embedding = true   # the embedding times sqrt(width) (Gemma)\n";
  if (m.norm_plus_one) s += "  norm_plus_one   = true   # RMSNorms scale by (1 + weight) (Gemma)\n";
  if (m.gelu_gate) s += "  activation = gelu_tanh   # GeGLU: a GELU (tanh form) gate\n";
  if (m.window > 0 && (m.window < m.context || m.global_every != 0))
    s += fmt::format("  sliding_window = {}   # each query attends the last {} positions{}\n",
                     m.window, m.window, m.global_every != 0 ? " (local layers)" : "");
  if (m.global_every != 0)
    s += fmt::format("  global_every = {}   # layers {}, {}, ... attend every earlier position\n",
                     m.global_every, m.global_every - 1, 2 * m.global_every - 1);
  if (m.query_pre_attn_scalar != 0)
    s += fmt::format("  query_pre_attn_scalar = {}   # q . k scaled by 1 / sqrt({})\n",
                     format_real(m.query_pre_attn_scalar), format_real(m.query_pre_attn_scalar));
  if (m.attention_softcap != 0)
    s += fmt::format("  attention_softcap = {}   # scores X tanh(s / X)\n",
                     format_real(m.attention_softcap));
  if (m.logit_softcap != 0)
    s += fmt::format("  logit_softcap = {}   # logits X tanh(l / X)\n",
                     format_real(m.logit_softcap));
  if (m.rope_local_theta != 0)
    s += fmt::format("  rope_local_theta = {}   # the local layers' rotary base\n",
                     format_real(m.rope_local_theta));
  if (m.llama && m.head_dim > 0 && m.head_dim * m.heads != m.width)
    s += fmt::format("  head_dim   = {}   # q is heads * head_dim = {} wide\n", m.head_dim,
                     m.heads * m.head_dim);
  s += fmt::format("  tie_embeddings = {}\n}}\n", m.tied ? "true" : "false");
  s += fmt::format(
      "\nunits {{\n  each block\n}}\n"
      "\nparallel {{\n"
      "  world     = 8\n"
      "  sharding  = full_shard\n"
      "  precision {{ param = bf16  reduce = fp32  master = fp32 }}\n"
      "}}\n"
      "\ntrain {{\n"
      "  optimizer   = adamw(lr = 3e-4, betas = (0.9, 0.95), weight_decay = 0.1)\n"
      "  lr_schedule = cosine(warmup = 100, min = 3e-5)\n"
      "  micro_batch = {}\n"
      "  steps       = 1000\n"
      "  clip        = 1.0\n"
      "  data        = synthetic(seed = 1)\n"
      "}}\n",
      std::max<int64_t>(1, kImportMicroBatchTokens / context));
  return s;
}

// "n_embd = 768", or that the config has no such key (and its default).
std::string config_says(const hf_mismatch& d, const std::string& config) {
  if (d.config_value == "absent") return fmt::format("{} has no {}", config, d.config_key);
  if (d.config_value.starts_with("absent ("))
    return fmt::format("{} has no {}, which defaults to {}", config, d.config_key,
                       d.config_value.substr(8, d.config_value.size() - 9));
  return fmt::format("{} has {} = {}", config, d.config_key, d.config_value);
}

// Where the spec's model section states `spec_key` ("width", or "rope_scaling
// factor": an argument of rope_scaling's value); null where it does not.
const ast::Value* value_of(const ast::Section& model, const std::string& spec_key) {
  const size_t space = spec_key.find(' ');
  const std::string key = spec_key.substr(0, space);
  for (const ast::Entry& e : model.entries) {
    if (e.key != key || e.kind != ast::Entry::Kind::Assign) continue;
    if (space == std::string::npos) return &e.value;
    for (const ast::Arg& a : e.value.args)
      if (a.name == spec_key.substr(space + 1)) return &a.value;
    return &e.value;
  }
  return nullptr;
}

}  // namespace

int run_import_hf(const std::string& source, const std::string& output) {
  const std::string config = config_path_of(source);
  const bool to_stdout = output.empty() || output == "-";
  std::error_code ec;
  if (!to_stdout && fs::equivalent(output, config, ec)) {
    error(
        fmt::format("-o {}: that is the config.json read; write the spec to another file", output));
    return 1;
  }
  if (std::string reason = to_stdout ? "" : unwritable_output_reason(output); !reason.empty()) {
    error(fmt::format("cannot write the spec '{}': {}", output, reason));
    return 1;
  }
  std::vector<hf_problem> problems;
  hf_model m;
  try {
    m = hf_model_of_config(config, &problems);
  } catch (const std::exception& e) {
    error(e.what());
    return 1;
  }
  for (const hf_problem& p : problems)
    error(p.value == "absent" ? fmt::format("{}: {} is absent: {}", config, p.key, p.why)
                              : fmt::format("{}: {} = {}: {}", config, p.key, p.value, p.why));
  if (!problems.empty()) {
    std::fputs(
        fmt::format(
            "fsdpgen: no spec written: {} key{} of {} describe{} what fsdpgen does not build\n",
            problems.size(), problems.size() == 1 ? "" : "s", config,
            problems.size() == 1 ? "s" : "")
            .c_str(),
        stderr);
    return 1;
  }
  const std::string text = spec_text(m, source, config);
  // What is written must check and match the config it came from.
  const FrontendResult r = load_spec_text(to_stdout ? "<import-hf>" : output, text);
  if (!r.spec) {
    error(fmt::format("{} describes a model the spec language cannot hold:\n{}", config,
                      r.diagnostics));
    return 1;
  }
  if (const std::vector<hf_mismatch> d = hf_config_mismatches(config, hf_model_of(r.spec->model));
      !d.empty()) {
    std::fputs(
        fmt::format("fsdpgen: internal error: the spec written from {} differs from it "
                    "at {} = {} (spec: {} = {})\n",
                    config, d[0].config_key, d[0].config_value, d[0].spec_key, d[0].spec_value)
            .c_str(),
        stderr);
    return 3;
  }
  if (to_stdout) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  std::ofstream f(output, std::ios::binary);
  f << text;
  f.close();
  if (!f) {
    error(fmt::format("cannot write '{}'", output));
    return 1;
  }
  std::fputs(fmt::format("fsdpgen: wrote {} from {}\n", output, config).c_str(), stderr);
  return 0;
}

int run_check_hf(const std::string& spec_path, const Spec& spec, const std::string& source) {
  const std::string config = config_path_of(source);
  std::vector<hf_mismatch> diffs;
  try {
    diffs = hf_config_mismatches(config, hf_model_of(spec.model));
  } catch (const std::exception& e) {
    error(e.what());
    return 1;
  }
  if (diffs.empty()) {
    std::fputs(fmt::format("{}: model {} matches {}\n", spec_path, spec.model.name, config).c_str(),
               stdout);
    return 0;
  }
  std::string text, why;
  if (!read_file(spec_path, text, why)) {
    error(fmt::format("cannot read spec file '{}': {}", spec_path, why));
    return 1;
  }
  const SourceFile file(spec_path, std::move(text));
  Diagnostics parsing(file), diags(file);
  const ast::File tree = parse(file, parsing);
  const auto model = std::find_if(tree.sections.begin(), tree.sections.end(),
                                  [](const ast::Section& s) { return s.kind == "model"; });
  if (model == tree.sections.end()) {
    error(fmt::format("{} has no model section any more", spec_path));
    return 1;
  }
  const Span name = model->name.empty() ? model->kind_span : model->name_span;
  for (const hf_mismatch& d : diffs) {
    if (d.unbuildable) {
      diags.error(name, fmt::format("{}: {}", config_says(d, config), d.spec_key));
      continue;
    }
    if (const ast::Value* v = value_of(*model, d.spec_key)) {
      diags.error(v->span,
                  fmt::format("{} = {}, but {}", d.spec_key, d.spec_value, config_says(d, config)));
      continue;
    }
    Diagnostic& e = diags.error(name, fmt::format("{} is {} by default, but {}", d.spec_key,
                                                  d.spec_value, config_says(d, config)));
    Diagnostics::note(e, fmt::format("set {} in the model section to match", d.spec_key));
  }
  std::fputs(diags.render().c_str(), stderr);
  return 1;
}

namespace {

struct ImportHfFlags {
  std::string source, output;
};

}  // namespace

Command add_import_hf_command(CLI::App& app) {
  auto f = std::make_shared<ImportHfFlags>();
  CLI::App* import_hf = app.add_subcommand(
      "import-hf",
      "write the spec of a Hugging Face model (GPT-2, Llama and the architectures "
      "docs/huggingface.md lists) from its config.json, with default units, parallel and train "
      "sections to edit");
  import_hf->add_option("source", f->source, "a Hugging Face model directory, or its config.json")
      ->required();
  import_hf->add_option("-o,--output", f->output, "the spec to write (default: stdout)");
  import_hf->footer(
      "Exit status: 0 written, 1 the config cannot be read or has keys no spec represents (all "
      "named) or the spec cannot be written, 2 bad command line.");
  return {import_hf, [f] { return run_import_hf(f->source, f->output); }};
}

}  // namespace fsdpgen
