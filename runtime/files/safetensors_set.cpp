// safetensors_set: one file, a directory or an index, opened into one view.
#include "runtime/files/safetensors_set.h"
#include "runtime/files/file_io.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path, what));
}

// Every tensor of a single file.
safetensors_set one_file(const std::string& path) {
  safetensors_set s;
  s.path = path;
  s.files.push_back(safetensors_open(path));
  const safetensors_file& f = s.files.back();
  for (size_t t = 0; t < f.tensors.size(); ++t)
    s.where[f.tensors[t].name] = {0, t};
  return s;
}

nlohmann::json read_json(const std::string& path) {
  const std::string text = file_read_whole(path, kJsonFileMaxBytes);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("not JSON: {}", e.what()));
  }
}

// The shards an index maps tensors to, each opened once, and every tensor
// checked to be where the index says.
safetensors_set from_index(const std::string& index_path) {
  const nlohmann::json index = read_json(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path,
         "no \"weight_map\" object (a Hugging Face index maps each tensor to its file)");
  safetensors_set s;
  s.path = index_path;
  s.dir = fs::path(index_path).parent_path().string();
  std::map<std::string, size_t> file_of;
  int64_t bytes = 0;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      fail(index_path, fmt::format("weight_map[\"{}\"] is not a file name", name));
    const std::string shard = file.get<std::string>();
    auto [it, added] = file_of.try_emplace(shard, s.files.size());
    if (added) {
      const std::string shard_path = (fs::path(s.dir) / shard).string();
      try {
        s.files.push_back(safetensors_open(shard_path));
      } catch (const std::exception& e) {
        fail(index_path, fmt::format("the file it names for tensor '{}': {}", name, e.what()));
      }
    }
    const safetensors_file& f = s.files[it->second];
    const safetensors_tensor* t = f.find(name);
    if (!t)
      fail(index_path,
           fmt::format("tensor '{}' is mapped to {}, which has no such tensor", name, f.path));
    s.where[name] = {it->second, static_cast<size_t>(t - f.tensors.data())};
    bytes += t->bytes;
  }
  if (index.contains("metadata") && index["metadata"].is_object() &&
      index["metadata"].contains("total_size")) {
    const nlohmann::json& total = index["metadata"]["total_size"];
    if (!total.is_number_integer() || total.get<int64_t>() != bytes)
      fail(index_path, fmt::format("metadata.total_size is {}, but its tensors hold {} bytes",
                                   total.dump(), bytes));
  }
  return s;
}

}  // namespace

std::pair<const safetensors_file*, const safetensors_tensor*> safetensors_set::find(
    std::string_view name) const {
  auto it = where.find(name);
  if (it == where.end()) return {nullptr, nullptr};
  const safetensors_file& f = files[it->second.first];
  return {&f, &f.tensors[it->second.second]};
}

safetensors_set safetensors_set_open(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / kIndexName))
      return from_index((fs::path(path) / kIndexName).string());
    if (fs::exists(fs::path(path) / kSingleName)) {
      safetensors_set s = one_file((fs::path(path) / kSingleName).string());
      s.dir = path;
      return s;
    }
    fail(path, fmt::format("a directory without {} or {} (a Hugging Face model directory has one)",
                           kIndexName, kSingleName));
  }
  if (path.size() >= 5 && path.ends_with(".json")) return from_index(path);
  return one_file(path);
}
