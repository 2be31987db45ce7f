// checkpoint_merge: checkpoint shards -> one safetensors file, or a Hugging
// Face model directory of shard files and their index.
#include "runtime/files/checkpoint_merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/checkpoint_files.h"
#include "runtime/files/file_io.h"
#include "runtime/files/safetensors.h"

namespace {

namespace fs = std::filesystem;

// A tensor of the checkpoint: its unit and its entry there.
struct tensor_ref {
  int unit;
  const checkpoint_tensor* t;
};

// Writes `tensors` (read through `reader`) into one safetensors file at path
// (through path.partial, renamed when complete); returns its bytes.
int64_t write_file(const std::string& path, const std::vector<tensor_ref>& tensors,
                   const std::string& dtype, const std::map<std::string, std::string>& metadata,
                   checkpoint_reader& reader) {
  std::vector<safetensors_entry> entries;
  for (const tensor_ref& r : tensors)
    entries.push_back({r.t->name, r.t->shape});
  const safetensors_layout layout = safetensors_plan(entries, dtype, metadata);
  const std::string partial = path + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create {}: {}", partial, std::strerror(errno)));
  try {
    safetensors_write_header(fd, partial, layout);
    std::vector<float> values;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const checkpoint_tensor& t = *tensors[i].t;
      values.resize(static_cast<size_t>(t.elems()));
      reader.weights(tensors[i].unit, t.offset, t.offset + t.elems(), values.data());
      safetensors_write(fd, partial, layout.tensors[i], 0, t.elems(), values.data());
    }
    if (::fsync(fd) != 0)
      throw std::runtime_error(fmt::format("cannot sync {}: {}", partial, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    std::remove(partial.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(partial.c_str());
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", partial, path, why));
  }
  return layout.file_bytes;
}

// A small file of the model directory, written whole or an error.
void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
}

int64_t dtype_bytes_of(const std::string& dtype) {
  return dtype == "F32" ? 4 : 2;
}

// Tensors in order into shards of at most max_bytes of data each (a larger
// tensor alone in its own), as transformers' save_pretrained fills them.
std::vector<std::vector<tensor_ref>> shards_of(const std::vector<tensor_ref>& all,
                                               int64_t elem_bytes, int64_t max_bytes) {
  std::vector<std::vector<tensor_ref>> shards(1);
  int64_t bytes = 0;
  for (const tensor_ref& r : all) {
    const int64_t b = r.t->elems() * elem_bytes;
    if (!shards.back().empty() && bytes + b > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(r);
    bytes += b;
  }
  return shards;
}

}  // namespace

std::optional<int64_t> shard_size_bytes(const std::string& text) {
  static const std::map<std::string, double> units = {
      {"", 1},     {"B", 1},     {"kB", 1e3},     {"KB", 1e3},      {"MB", 1e6},
      {"GB", 1e9}, {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1 << 20}, {"GiB", double(1 << 30)}};
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  auto it = units.find(text.substr(used));
  if (it == units.end() || !(value > 0) || value * it->second > 9e18) return std::nullopt;
  return static_cast<int64_t>(value * it->second);
}

checkpoint_merged checkpoint_merge(const std::string& checkpoint, const std::string& out,
                                   const std::string& dtype, int64_t max_shard_bytes,
                                   const std::string& config_json) {
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw std::runtime_error(fmt::format("unknown dtype {} (F32, BF16 or F16)", dtype));
  checkpoint_merged r;
  r.checkpoint = checkpoint_resolve(checkpoint);
  if (const std::string overlap = file_output_overlap(out, {}, r.checkpoint); !overlap.empty())
    throw std::runtime_error(fmt::format(
        "{}: merge writes nothing into the checkpoint it reads; name an output outside it",
        overlap));
  checkpoint_reader reader(r.checkpoint, checkpoint_manifest_read(r.checkpoint));
  const checkpoint_manifest& m = reader.manifest();
  r.step = m.step;
  r.spec = m.spec;
  std::vector<tensor_ref> all;
  for (size_t u = 0; u < m.units.size(); ++u)
    for (const checkpoint_tensor& t : m.units[u].tensors) {
      all.push_back({static_cast<int>(u), &t});
      ++r.tensors;
      r.params += t.elems();
    }
  // The metadata --save writes, so that both files are the same at one step.
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"fsdpgen_spec", m.spec}, {"fsdpgen_step", std::to_string(m.step)}};
  if (max_shard_bytes <= 0) {
    r.bytes = write_file(out, all, dtype, metadata, reader);
    return r;
  }

  // A model directory, written as out.partial and renamed when complete.
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec)))
    throw std::runtime_error(fmt::format(
        "{} exists: --max-shard-size writes a model directory there and replaces nothing", out));
  const fs::path partial = out + ".partial";
  fs::remove_all(partial, ec);
  if (!fs::create_directories(partial, ec))
    throw std::runtime_error(fmt::format("cannot create {}: {}", partial.string(), ec.message()));
  try {
    const std::vector<std::vector<tensor_ref>> shards =
        shards_of(all, dtype_bytes_of(dtype), max_shard_bytes);
    nlohmann::json weight_map = nlohmann::json::object();
    int64_t tensor_bytes = 0;
    for (size_t k = 0; k < shards.size(); ++k) {
      const std::string name = shards.size() == 1 ? "model.safetensors"
                                                  : fmt::format("model-{:05}-of-{:05}.safetensors",
                                                                k + 1, shards.size());
      r.bytes += write_file((partial / name).string(), shards[k], dtype, metadata, reader);
      for (const tensor_ref& t : shards[k]) {
        weight_map[t.t->name] = name;
        tensor_bytes += t.t->elems() * dtype_bytes_of(dtype);
      }
    }
    r.files = static_cast<int64_t>(shards.size());
    if (shards.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", tensor_bytes}}},
                                    {"weight_map", weight_map}};
      write_text((partial / "model.safetensors.index.json").string(), index.dump(2) + "\n");
    }
    if (!config_json.empty()) write_text((partial / "config.json").string(), config_json);
    if (fs::exists(out, ec)) fs::remove(out, ec);  // the empty directory checked above
    fs::rename(partial, out);
  } catch (...) {
    fs::remove_all(partial, ec);
    throw;
  }
  return r;
}
