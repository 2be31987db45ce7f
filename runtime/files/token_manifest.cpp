// token_manifest: a token set's manifest.json checked against the model.
#include "runtime/files/token_manifest.h"

#include <filesystem>
#include <map>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/file_io.h"

namespace {

using json = nlohmann::json;
constexpr const char* kFormat = "fsdpgen-tokens/1";

// What a manifest says of the set and of each shard it lists.
struct manifest {
  std::string path, tokenizer, sha256, dtype;
  int64_t vocab_size = 0;
  std::map<std::string, int64_t> special;  // token -> id
  std::map<std::string, int64_t> shards;   // file name -> tokens
  json tokenizer_object;                   // the manifest's "tokenizer"
};

// A manifest key's value, or an error naming the manifest and the key.
const json& at(const json& j, const std::string& key, const std::string& path) {
  if (!j.is_object() || !j.contains(key))
    throw std::runtime_error(fmt::format("{}: no key '{}'", path, key));
  return j.at(key);
}

int64_t integer(const json& j, const std::string& key, const std::string& path) {
  const json& v = at(j, key, path);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    throw std::runtime_error(
        fmt::format("{}: '{}' is {}, not a whole number", path, key, v.dump()));
  return v.get<int64_t>();
}

// Adds the shards a split lists ("splits" when complete, "resume" while
// being written: its whole shards).
void add_shards(const json& splits, manifest& m) {
  if (!splits.is_object()) return;
  for (const auto& [name, split] : splits.items()) {
    const json& shards = at(split, "shards", m.path);
    if (!shards.is_array())
      throw std::runtime_error(fmt::format("{}: '{}' shards is not a list", m.path, name));
    for (const json& s : shards) {
      const json& file = at(s, "file", m.path);
      if (!file.is_string())
        throw std::runtime_error(fmt::format("{}: a shard's 'file' is not a string", m.path));
      m.shards[file.get<std::string>()] = integer(s, "tokens", m.path);
    }
  }
}

// The manifest of `fsdpgen prepare` at `path`, or false when the file is
// absent or is some other manifest.json.
bool read_manifest(const std::string& path, manifest& m) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return false;
  json j;
  try {
    j = json::parse(file_read_whole(path, kJsonFileMaxBytes));
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string()) return false;
  const std::string format = j["format"].get<std::string>();
  if (format.rfind("fsdpgen-tokens/", 0) != 0) return false;
  if (format != kFormat)
    throw std::runtime_error(fmt::format(
        "{}: a token manifest of format '{}'; this binary reads '{}'", path, format, kFormat));
  m.path = path;
  const json& tokenizer = at(j, "tokenizer", path);
  m.tokenizer_object = tokenizer;
  m.tokenizer = at(tokenizer, "name", path).is_string() ? tokenizer["name"].get<std::string>() : "";
  m.sha256 =
      at(tokenizer, "sha256", path).is_string() ? tokenizer["sha256"].get<std::string>() : "";
  m.vocab_size = integer(tokenizer, "vocab_size", path);
  const json& special = at(tokenizer, "special_tokens", path);
  if (special.is_object())
    for (const auto& [token, id] : special.items())
      m.special[token] = integer(special, token, path);
  m.dtype = at(j, "dtype", path).is_string() ? j["dtype"].get<std::string>() : "";
  if (j.contains("splits")) add_shards(j["splits"], m);
  if (j.contains("resume") && j["resume"].contains("splits")) add_shards(j["resume"]["splits"], m);
  return true;
}

void check_model(const manifest& m, int64_t vocab) {
  if (m.vocab_size > vocab)
    throw std::runtime_error(fmt::format(
        "{}: these tokens were made by the tokenizer '{}' of {} tokens (ids up to {}), but the "
        "model's vocab is {}: prepare the data with the model's own tokenizer, or give the "
        "model vocab >= {}",
        m.path, m.tokenizer, m.vocab_size, m.vocab_size - 1, vocab, m.vocab_size));
  for (const auto& [token, id] : m.special)
    if (id >= vocab)
      throw std::runtime_error(fmt::format(
          "{}: the special token {} of the tokenizer '{}' is id {}, not < the model's vocab {}",
          m.path, token, m.tokenizer, id, vocab));
}

}  // namespace

void token_manifest_check(const std::vector<token_file>& files, int token_bytes, int64_t vocab) {
  std::map<std::string, manifest> seen;  // directory -> its manifest (path "" when none)
  const manifest* first = nullptr;       // the set's first manifest: the others' tokenizer
  for (const token_file& f : files) {
    const std::filesystem::path file(f.path);
    const std::string dir = file.parent_path().string();
    auto [it, fresh] = seen.try_emplace(dir);
    manifest& m = it->second;
    if (fresh) {
      if (!read_manifest((file.parent_path() / "manifest.json").string(), m)) continue;
      check_model(m, vocab);
      if (!first) first = &m;
      if (first->sha256 != m.sha256)
        throw std::runtime_error(fmt::format(
            "{}: made by the tokenizer '{}' (sha256 {}), but {} by '{}' (sha256 {}): a set's "
            "files are one tokenizer's tokens",
            m.path, m.tokenizer, m.sha256.substr(0, 12), first->path, first->tokenizer,
            first->sha256.substr(0, 12)));
    }
    if (m.path.empty()) continue;
    const std::string name = file.filename().string();
    const auto shard = m.shards.find(name);
    if (shard == m.shards.end())
      throw std::runtime_error(
          fmt::format("{}: not a shard that {} lists (a file of another preparation beside it?)",
                      f.path, m.path));
    if (shard->second != f.tokens)
      throw std::runtime_error(fmt::format("{}: holds {} tokens, but {} lists {} (written since?)",
                                           f.path, f.tokens, m.path, shard->second));
    const char* dtype = token_bytes == 2 ? "uint16" : "uint32";
    if (m.dtype != dtype)
      throw std::runtime_error(
          fmt::format("{}: holds {} tokens, but {} says {}", f.path, dtype, m.path, m.dtype));
  }
}

namespace {

// The manifest's {"token": ..., "id": ...} of `key` (eot, bos) into *token
// and *id; absent or null leaves them as they are.
void special_of(const manifest& m, const char* key, std::string* token, int64_t* id) {
  const auto it = m.tokenizer_object.find(key);
  if (it == m.tokenizer_object.end() || it->is_null()) return;
  const json& t = at(*it, "token", m.path);
  if (!t.is_string())
    throw std::runtime_error(
        fmt::format("{}: tokenizer {}'s 'token' is not a string", m.path, key));
  *token = t.get<std::string>();
  *id = integer(*it, "id", m.path);
}

}  // namespace

std::optional<token_set_tokenizer> token_set_tokenizer_of(const std::string& token_file) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(token_file).parent_path();
  manifest m;
  if (!read_manifest((dir / "manifest.json").string(), m)) return std::nullopt;
  token_set_tokenizer t;
  t.manifest = m.path;
  t.name = m.tokenizer;
  special_of(m, "eot", &t.eot, &t.eot_id);
  special_of(m, "bos", &t.bos, &t.bos_id);
  std::error_code ec;
  if (const auto file = m.tokenizer_object.find("file");
      file != m.tokenizer_object.end() && !file->is_null()) {
    const std::string name = file->is_string() ? file->get<std::string>() : "";
    if (name.empty() || name == "." || name == ".." || fs::path(name).filename() != name)
      throw std::runtime_error(fmt::format(
          "{}: tokenizer 'file' is {}, not the name of a file beside it", m.path, file->dump()));
    t.tokenizer_json = (dir / name).string();
    if (!fs::is_regular_file(t.tokenizer_json, ec))
      throw std::runtime_error(
          fmt::format("{}: names the tokenizer {}, which is not there", m.path, t.tokenizer_json));
  }
  if (const fs::path config = dir / "tokenizer_config.json"; fs::is_regular_file(config, ec))
    t.tokenizer_config = config.string();
  return t;
}
