// hf_directory: a Hugging Face model directory, planned, checked, written
// through DIR.partial and renamed into place.
#include "runtime/files/hf_directory.h"

#include <fcntl.h>
#include <stdio.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/file_io.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::string_view kSuffix = ".safetensors";
const char* const kIndex = "model.safetensors.index.json";

// The files a model directory of this writer holds (a directory holding
// only these, or nothing, is replaced).
bool model_directory_file(const std::string& name) {
  static const std::regex shard("model-[0-9]{5}-of-[0-9]{5}\\.safetensors");
  for (const char* own : {"config.json", "generation_config.json", "model.safetensors", kIndex,
                          "tokenizer.json", "tokenizer_config.json"})
    if (name == own) return true;
  return std::regex_match(name, shard);
}

int64_t dtype_bytes(const std::string& dtype) {
  return dtype == "F32" ? 4 : 2;
}

// A small file of the model directory, written whole or an error.
void write_text(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  if (!f)
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
}

// tokenizer_config.json: the token set's, or one naming the fast tokenizer
// and the special tokens, with model_max_length the model's context.
std::string tokenizer_config_of(const token_set_tokenizer& t, const hf_model& m) {
  nlohmann::ordered_json c;
  if (!t.tokenizer_config.empty()) {
    try {
      c = nlohmann::ordered_json::parse(file_read_whole(t.tokenizer_config, kJsonFileMaxBytes));
    } catch (const json::exception& e) {
      throw std::runtime_error(fmt::format("{}: not JSON: {}", t.tokenizer_config, e.what()));
    }
    if (!c.is_object())
      throw std::runtime_error(fmt::format("{}: not a JSON object", t.tokenizer_config));
  } else {
    c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
         {"bos_token", t.bos.empty() ? t.eot : t.bos},
         {"eos_token", t.eot}};
  }
  c["model_max_length"] = m.context;
  return c.dump(1) + "\n";
}

std::string dtype_word(const std::string& dtype) {
  return dtype == "BF16" ? "bfloat16" : dtype == "F16" ? "float16" : "float32";
}

}  // namespace

bool hf_output_is_directory(const std::string& path) {
  return !(path.size() > kSuffix.size() &&
           path.compare(path.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0);
}

std::vector<hf_weight_file> hf_weight_files(const std::vector<safetensors_entry>& entries,
                                            const std::string& dtype,
                                            const std::map<std::string, std::string>& metadata,
                                            int64_t max_shard_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  int64_t bytes = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    int64_t b = dtype_bytes(dtype);
    for (int64_t d : entries[i].shape)
      b *= d;
    if (!groups.back().empty() && bytes + b > max_shard_bytes) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(i);
    bytes += b;
  }
  std::vector<hf_weight_file> files;
  for (size_t k = 0; k < groups.size(); ++k) {
    hf_weight_file f;
    f.name = groups.size() == 1
                 ? "model.safetensors"
                 : fmt::format("model-{:05}-of-{:05}.safetensors", k + 1, groups.size());
    f.entries = groups[k];
    std::vector<safetensors_entry> mine;
    for (size_t i : f.entries)
      mine.push_back(entries[i]);
    f.layout = safetensors_plan(mine, dtype, metadata);
    files.push_back(std::move(f));
  }
  return files;
}

hf_directory_files hf_directory_files_of(const hf_model& m,
                                         const std::optional<token_set_tokenizer>& t,
                                         const std::string& dtype) {
  hf_directory_files f;
  f.ids = hf_special_ids_by_vocab(m);
  if (t) {
    for (auto [what, id] : {std::pair{"end-of-text", t->eot_id}, {"begin-of-text", t->bos_id}})
      if (id >= m.vocab)
        throw std::runtime_error(
            fmt::format("{}: the tokenizer's {} token is id {}, not below the model's vocab {}",
                        t->manifest, what, id, m.vocab));
    f.ids = {.bos = t->bos_id >= 0 ? t->bos_id : t->eot_id, .eos = t->eot_id, .pad = t->eot_id};
    f.ids_from = t->manifest;
    f.tokenizer_json = t->tokenizer_json;
    if (!f.tokenizer_json.empty()) f.tokenizer_config_json = tokenizer_config_of(*t, m);
  }
  f.config_json = hf_config_text(m, f.ids, dtype_word(dtype));
  f.generation_config_json = hf_generation_config_text(f.ids);
  return f;
}

std::string hf_directory_describe(const hf_directory_files& f) {
  auto id = [](int64_t v) { return v >= 0 ? std::to_string(v) : std::string("none"); };
  std::string s = fmt::format("config.json (bos {}, eos {}), generation_config.json", id(f.ids.bos),
                              id(f.ids.eos));
  if (!f.tokenizer_json.empty()) s += ", tokenizer.json, tokenizer_config.json";
  if (!f.ids_from.empty()) s += fmt::format(" (the tokenizer of {})", f.ids_from);
  if (!f.ids_from.empty() && f.tokenizer_json.empty())
    s += "; no tokenizer files: that manifest names no tokenizer.json (prepare the set again "
         "with this fsdpgen for one)";
  return s;
}

std::string hf_directory_path(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/')
    d.pop_back();
  return d;
}

std::string hf_directory_problem(const std::string& dir_given) {
  const std::string dir = hf_directory_path(dir_given);
  if (dir.empty() || dir == "/" || fs::path(dir).filename() == "." ||
      fs::path(dir).filename() == "..")
    return "not a name a directory can be written at (name a new directory, e.g. out/model)";
  if (const std::string kind = file_special_kind(dir); !kind.empty())
    return fmt::format("it is {}, not a directory", kind);
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    return fmt::format("it exists and is not a directory (a path ending in {} names one file)",
                       kSuffix);
  if (fs::is_directory(dir, ec)) {
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!model_directory_file(name) || !it->is_regular_file(ec))
        return fmt::format(
            "it holds {}, which no model directory has: only an empty directory or a model "
            "directory is replaced; name a new directory",
            name);
    }
    if (ec) return fmt::format("cannot list it: {}", ec.message());
  }
  const file_write_problem p = file_write_check(dir + ".partial");
  switch (p.what) {
    case file_write_problem::no_directory:
    case file_write_problem::not_a_directory:
      return fmt::format("{} is not a directory", p.dir);
    case file_write_problem::cannot_create:
      return fmt::format("{}: {}", p.dir, p.error);
    default:  // a DIR.partial a failed write left is replaced
      return "";
  }
}

std::string hf_directory_begin(const std::string& dir) {
  const fs::path partial = hf_directory_path(dir) + ".partial";
  std::error_code ec;
  fs::remove_all(partial, ec);
  if (!fs::create_directory(partial, ec))
    throw std::runtime_error(
        fmt::format("cannot create {}: {}", partial.string(), ec ? ec.message() : "it exists"));
  return partial.string();
}

void hf_directory_write_files(const std::string& partial,
                              const std::vector<hf_weight_file>& weights,
                              const hf_directory_files& f) {
  const fs::path d(partial);
  if (weights.size() > 1) {
    json weight_map = json::object();
    int64_t total = 0;
    for (const hf_weight_file& w : weights)
      for (const safetensors_tensor& t : w.layout.tensors) {
        weight_map[t.name] = w.name;
        total += t.bytes;
      }
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(d / kIndex, index.dump(2) + "\n");
  }
  write_text(d / "config.json", f.config_json);
  write_text(d / "generation_config.json", f.generation_config_json);
  if (!f.tokenizer_json.empty()) {
    write_text(d / "tokenizer.json", file_read_whole(f.tokenizer_json, kJsonFileMaxBytes));
    write_text(d / "tokenizer_config.json", f.tokenizer_config_json);
  }
}

void hf_directory_finish(const std::string& dir_given) {
  const std::string dir = hf_directory_path(dir_given);
  const std::string partial = dir + ".partial";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    if (std::rename(partial.c_str(), dir.c_str()) != 0)
      throw std::runtime_error(
          fmt::format("cannot rename {} to {}: {}", partial, dir, std::strerror(errno)));
    return;
  }
  // The one there (checked to be a model directory or empty): swapped with
  // the new one in one step, then removed; where the file system cannot
  // swap, moved aside first.
  if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(partial, ec);
    return;
  }
  const std::string aside = dir + ".replaced";
  fs::remove_all(aside, ec);
  if (std::rename(dir.c_str(), aside.c_str()) != 0 ||
      std::rename(partial.c_str(), dir.c_str()) != 0)
    throw std::runtime_error(
        fmt::format("cannot replace {} with {}: {}", dir, partial, std::strerror(errno)));
  fs::remove_all(aside, ec);
}

void hf_directory_abandon(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(hf_directory_path(dir) + ".partial", ec);
}
