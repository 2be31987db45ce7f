// Sample: sample's flags; the model, its weights and tokenizer found from
// MODEL and them, the prompt encoded, and the samples printed.
#include "codegen/cli/Sample.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/cli/Common.h"
#include "codegen/cli/Merge.h"
#include "codegen/cli/PythonTool.h"
#include "dsl/layer_reader/Subprocess.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/checkpoint_merge.h"
#include "runtime/files/file_io.h"
#include "runtime/files/hf_config.h"
#include "runtime/files/hf_model_of.h"
#include "runtime/generate/generator.h"
#include "runtime/generate/token_decoder.h"

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

// What MODEL names, read: the model's facts, its weights, the tokenizer.json
// that goes with it ("" none) and the token a document starts with (-1 none).
struct loaded_model {
  std::string what;  // for the first line
  hf_model model;
  generate_weights weights;
  std::string tokenizer, no_tokenizer;  // no_tokenizer: why there is none
  int64_t start = -1;
  std::string start_text;
};

void take_token_set(loaded_model& l, const std::optional<token_set_tokenizer>& t) {
  if (!t || t->tokenizer_json.empty()) return;
  l.tokenizer = t->tokenizer_json;
  l.start = t->bos_id >= 0 ? t->bos_id : t->eot_id;
  l.start_text = t->bos_id >= 0 ? t->bos : t->eot;
}

loaded_model load_hf_directory(const std::string& dir, const std::string& spec) {
  if (!spec.empty())
    throw std::runtime_error(fmt::format(
        "--spec {}: {} is a Hugging Face model directory, whose config.json says the model; "
        "--spec is for a checkpoint or a .safetensors file",
        spec, dir));
  loaded_model l;
  const std::string config = (fs::path(dir) / "config.json").string();
  std::vector<hf_problem> problems;
  l.model = hf_model_of_config(config, &problems);
  if (!problems.empty()) {
    std::string why;
    for (const hf_problem& p : problems)
      why += fmt::format("\n  {} = {}: {}", p.key, p.value, p.why);
    throw std::runtime_error(fmt::format("{}: a model fsdpgen cannot run:{}", config, why));
  }
  l.weights = generate_weights_read(dir);
  l.what = dir;
  if (const fs::path t = fs::path(dir) / "tokenizer.json"; fs::exists(t))
    l.tokenizer = t.string();
  else
    l.no_tokenizer = fmt::format("{} has no tokenizer.json", dir);
  const nlohmann::json c = nlohmann::json::parse(file_read_whole(config, 1 << 24), nullptr, false);
  for (const char* key : {"bos_token_id", "eos_token_id"})
    if (l.start < 0 && c.is_object() && c.contains(key) && c[key].is_number_integer()) {
      l.start = c[key].get<int64_t>();
      l.start_text = fmt::format("{} {}", key, l.start);
    }
  return l;
}

loaded_model load_safetensors(const std::string& file, const std::string& spec) {
  if (spec.empty())
    throw std::runtime_error(fmt::format(
        "{}: a .safetensors file holds weights but not the model's shape; name the spec it was "
        "trained from with --spec FILE (or give a checkpoint or a model directory)",
        file));
  loaded_model l;
  const spec_origin o = spec_origin_of(spec);
  l.model = hf_model_of(o.spec.model);
  l.weights = generate_weights_read(file);
  l.what = fmt::format("{} (spec {})", file, spec);
  take_token_set(l, o.tokenizer);
  l.no_tokenizer = o.no_tokenizer;
  return l;
}

loaded_model load_checkpoint(const std::string& path, const std::string& spec) {
  loaded_model l;
  const std::string step_dir = checkpoint_resolve(path);
  const spec_origin o = checkpoint_spec_origin(step_dir, spec);
  l.model = hf_model_of(o.spec.model);
  checkpoint_weights w = checkpoint_weights_read(step_dir);
  for (checkpoint_tensor_values& t : w.tensors) {
    l.weights.shapes[t.name] = t.shape;
    l.weights.data[t.name] = std::move(t.values);
  }
  l.what = fmt::format("{} (step {}, spec {})", w.checkpoint, w.step, o.spec_path);
  take_token_set(l, o.tokenizer);
  l.no_tokenizer = o.no_tokenizer;
  return l;
}

loaded_model load_model(const std::string& model, const std::string& spec) {
  std::error_code ec;
  if (!fs::exists(model, ec))
    throw std::runtime_error(fmt::format(
        "{}: no such file or directory (MODEL is a checkpoint, a .safetensors file with --spec, "
        "or a Hugging Face model directory)",
        model));
  if (fs::is_directory(model, ec) && fs::exists(fs::path(model) / "config.json", ec))
    return load_hf_directory(model, spec);
  if (fs::is_regular_file(model, ec)) {
    if (!model.ends_with(".safetensors"))
      throw std::runtime_error(fmt::format(
          "{}: not a .safetensors file, a checkpoint or a model directory with config.json",
          model));
    return load_safetensors(model, spec);
  }
  return load_checkpoint(model, spec);
}

// "1, 2,3" into ids, each in [0, vocab).
std::vector<int32_t> parse_ids(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(at, end - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || id < 0 || id >= vocab)
      throw std::runtime_error(fmt::format(
          "--prompt-ids {}: '{}' is not a token id of the model (0 to {})", text, item, vocab - 1));
    ids.push_back(static_cast<int32_t>(id));
    at = end + 1;
  }
  return ids;
}

// The prompt's text into ids by tools/encode_prompt.py (Hugging Face tokenizers).
std::vector<int32_t> encode(const std::string& tokenizer, const std::string& text) {
  char dir_template[] = "/tmp/fsdpgen-sample-XXXXXX";
  if (!::mkdtemp(dir_template))
    throw std::runtime_error("--prompt: cannot make a temporary directory for the encoder");
  const fs::path dir = dir_template;
  const std::string out = (dir / "ids.json").string(), log = (dir / "log.txt").string();
  const layers::ProcessEnd end = layers::run_to_file(
      {tool_python(), std::string(FSDPGEN_TOOLS_DIR) + "/encode_prompt.py", tokenizer, text, out},
      log, 120);
  std::string ids_text, why;
  try {
    if (end.ok()) ids_text = file_read_whole(out, 1 << 28);
  } catch (const std::exception&) {
  }
  if (!end.ok()) {
    try {
      why = file_read_whole(log, 1 << 16);
    } catch (const std::exception&) {
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!end.ok())
    throw std::runtime_error(fmt::format(
        "--prompt: encoding it with {} through Hugging Face tokenizers ({}) failed{}{}{}",
        tokenizer, tool_python(), why.empty() ? "" : ": ", why,
        end.how == layers::ProcessEnd::not_started
            ? "; make the tools' venv with `bash tools/setup.sh python`, or give --prompt-ids"
            : ""));
  return nlohmann::json::parse(ids_text).at("ids").get<std::vector<int32_t>>();
}

}  // namespace

int run_sample(const SampleOptions& o) {
  try {
    sample_settings s{o.temperature, o.top_k, o.top_p, o.seed};
    if (const std::string why = sample_settings_problem(s); !why.empty())
      throw std::runtime_error("--" + why);
    if (o.tokens < 1) throw std::runtime_error(fmt::format("--tokens {} is below 1", o.tokens));
    if (o.samples < 1) throw std::runtime_error(fmt::format("--samples {} is below 1", o.samples));
    if (!o.prompt.empty() && !o.prompt_ids.empty())
      throw std::runtime_error("--prompt and --prompt-ids: give one of them");
    loaded_model l = load_model(o.model, o.spec);
    const hf_model& m = l.model;

    std::optional<token_decoder> decoder;
    std::string decoded_by;
    std::string tokenizer = o.tokenizer.empty() ? l.tokenizer : o.tokenizer;
    if (!o.tokenizer.empty() && fs::is_directory(o.tokenizer))
      tokenizer = (fs::path(o.tokenizer) / "tokenizer.json").string();
    if (!tokenizer.empty()) {
      decoder = token_decoder::from_file(tokenizer);
      decoded_by = tokenizer;
      if (!o.tokenizer.empty() && l.start < 0) {
        for (const char* special : {"<|begin_of_text|>", "<|endoftext|>", "<s>"})
          if (l.start < 0 && decoder->id_of(special) >= 0) {
            l.start = decoder->id_of(special);
            l.start_text = special;
          }
      }
    } else if (m.vocab == 256) {
      decoder = token_decoder::bytes();
      decoded_by = "bytes (a 256-token model)";
      if (l.start < 0) l.start = '\n', l.start_text = "a newline";
    }

    std::vector<int32_t> prompt;
    if (!o.prompt_ids.empty()) {
      prompt = parse_ids(o.prompt_ids, m.vocab);
    } else if (!o.prompt.empty()) {
      if (!tokenizer.empty()) {
        prompt = encode(tokenizer, o.prompt);
      } else if (m.vocab == 256) {
        for (unsigned char c : o.prompt)
          prompt.push_back(c);
      } else {
        throw std::runtime_error(fmt::format(
            "--prompt needs a tokenizer to encode it, and {}: name a tokenizer.json with "
            "--tokenizer, or give --prompt-ids",
            l.no_tokenizer.empty() ? "there is none" : l.no_tokenizer));
      }
      if (prompt.empty()) throw std::runtime_error("--prompt: the text encodes to no tokens");
      for (int32_t id : prompt)
        if (id < 0 || id >= m.vocab)
          throw std::runtime_error(fmt::format(
              "--prompt: the tokenizer {} gave id {}, outside the model's vocabulary of {}",
              tokenizer, id, m.vocab));
    } else {
      if (l.start < 0 || l.start >= m.vocab)
        throw std::runtime_error(
            "no prompt, and no document-start token to begin from (no tokenizer set's manifest "
            "nor config.json names one): give --prompt TEXT or --prompt-ids IDS");
      prompt = {static_cast<int32_t>(l.start)};
    }
    if (static_cast<int64_t>(prompt.size()) >= m.context)
      throw std::runtime_error(
          fmt::format("the prompt's {} tokens leave no room in the model's context of {}",
                      prompt.size(), m.context));
    if (!decoder)
      std::fputs(fmt::format("fsdpgen: note: {}; the samples are printed as ids (--tokenizer "
                             "FILE decodes them)\n",
                             l.no_tokenizer.empty() ? "no tokenizer" : l.no_tokenizer)
                     .c_str(),
                 stderr);

    generator g(m, l.weights.view());
    out(fmt::format(
        "fsdpgen: sampling {} ({}, {} layers, vocabulary {}): {} sample{} of {} tokens after {} "
        "prompt token{}, temperature {}, top-k {}, top-p {}, seed {}{}\n",
        l.what, hf_model_type(m), m.layers, m.vocab, o.samples, o.samples == 1 ? "" : "s", o.tokens,
        prompt.size(), prompt.size() == 1 ? "" : "s", o.temperature, o.top_k, o.top_p, o.seed,
        decoder ? fmt::format(", decoded by {}", decoded_by) : ""));
    for (int64_t k = 0; k < o.samples; ++k) {
      s.seed = o.seed + static_cast<uint64_t>(k);
      std::vector<int32_t> ids = prompt;
      const std::vector<int32_t> added = g.generate(prompt, o.tokens, s);
      ids.insert(ids.end(), added.begin(), added.end());
      std::string text;
      if (decoder) {
        text = decoder->decode(ids);
      } else {
        for (int32_t id : ids) {
          if (!text.empty()) text += ' ';
          text += std::to_string(id);
        }
      }
      out(fmt::format("--- sample {}/{} (seed {}{})\n{}\n", k + 1, o.samples, s.seed,
                      static_cast<int64_t>(added.size()) < o.tokens
                          ? fmt::format(", {} tokens: the context is full", added.size())
                          : "",
                      text));
    }
    return 0;
  } catch (const std::exception& e) {
    error(e.what());
    return kExitSpecError;
  }
}

Command add_sample_command(CLI::App& app) {
  auto o = std::make_shared<SampleOptions>();
  CLI::App* sample = app.add_subcommand(
      "sample",
      "text generated on the CPU with a KV cache from a checkpoint, a .safetensors file with "
      "--spec, or a Hugging Face model directory (docs/sample.md)");
  sample
      ->add_option("model", o->model,
                   "a checkpoint (step_N or a directory of them), a .safetensors file (with "
                   "--spec) or a Hugging Face model directory (config.json)")
      ->required();
  sample->add_option("--spec", o->spec,
                     "the spec the weights were trained from (default: a checkpoint's own)");
  sample->add_option("--prompt", o->prompt,
                     "text to continue, encoded by the tokenizer through Hugging Face tokenizers "
                     "(bytes for a 256-token model)");
  sample->add_option("--prompt-ids", o->prompt_ids,
                     "token ids to continue, e.g. 50256,464 (default: the document-start token)");
  sample->add_option("--tokens", o->tokens, "tokens to generate (default 64)");
  sample->add_option("--temperature", o->temperature,
                     "logits divided by it before drawing; 0: greedy (default 1)");
  sample->add_option("--top-k", o->top_k, "draw among the k most likely tokens (default 0: all)");
  sample->add_option("--top-p", o->top_p,
                     "draw among the fewest most likely tokens whose probability reaches p "
                     "(default 1: all)");
  sample->add_option("--seed", o->seed,
                     "the generator's seed (std::mt19937_64); sample k uses seed + k "
                     "(default 1337)");
  sample->add_option("--samples", o->samples, "samples to print (default 1)");
  sample->add_option("--tokenizer", o->tokenizer,
                     "the tokenizer.json (or its directory) that decodes the ids (default: the "
                     "model directory's, or the one beside the run's token set's manifest.json)");
  return {sample, [o] { return run_sample(*o); }};
}

}  // namespace fsdpgen
