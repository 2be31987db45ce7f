// checkpoint_merge: checkpoint shards -> one safetensors file, or a Hugging
// Face model directory (runtime/files/hf_directory.h).
#include "runtime/files/checkpoint_merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/file_io.h"
#include "runtime/files/hf_directory.h"
#include "runtime/files/safetensors.h"

namespace {

namespace fs = std::filesystem;

// A tensor of the checkpoint: its unit and its entry there.
struct tensor_ref {
  int unit;
  const checkpoint_tensor* t;
};

// The checkpoint's tensors in the manifest's order, unit by unit.
std::vector<tensor_ref> tensors_of(const checkpoint_manifest& m) {
  std::vector<tensor_ref> all;
  for (size_t u = 0; u < m.units.size(); ++u)
    for (const checkpoint_tensor& t : m.units[u].tensors)
      all.push_back({static_cast<int>(u), &t});
  return all;
}

// Tensor r whole into out (r.t->elems() values), whatever world wrote it.
void read_tensor(checkpoint_reader& reader, const tensor_ref& r, float* out) {
  reader.weights(r.unit, r.t->offset, r.t->offset + r.t->elems(), out);
}

// Writes `tensors` (read through `reader`) into one safetensors file at path
// (through path.partial, renamed when complete) laid out as `layout`;
// returns its bytes.
int64_t write_file(const std::string& path, const std::vector<tensor_ref>& tensors,
                   const safetensors_layout& layout, checkpoint_reader& reader) {
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
      read_tensor(reader, tensors[i], values.data());
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
                                   const std::string& dtype, const hf_directory_files* directory,
                                   int64_t max_shard_bytes) {
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw std::runtime_error(fmt::format("unknown dtype {} (F32, BF16 or F16)", dtype));
  checkpoint_merged r;
  r.checkpoint = checkpoint_resolve(checkpoint);
  if (const std::string overlap = file_output_overlap(out, {}, r.checkpoint); !overlap.empty())
    throw std::runtime_error(fmt::format(
        "{}: merge writes nothing into the checkpoint it reads; name an output outside it",
        overlap));
  if (directory)
    if (const std::string why = hf_directory_problem(out); !why.empty())
      throw std::runtime_error(
          fmt::format("{}: cannot write a model directory there: {}", out, why));
  checkpoint_reader reader(r.checkpoint, checkpoint_manifest_read(r.checkpoint));
  const checkpoint_manifest& m = reader.manifest();
  r.step = m.step;
  r.spec = m.spec;
  const std::vector<tensor_ref> all = tensors_of(m);
  std::vector<safetensors_entry> entries;
  for (const tensor_ref& t : all) {
    entries.push_back({t.t->name, t.t->shape});
    ++r.tensors;
    r.params += t.t->elems();
  }
  // The metadata --save writes, so that both files are the same at one step.
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"fsdpgen_spec", m.spec}, {"fsdpgen_step", std::to_string(m.step)}};
  if (!directory) {
    r.bytes = write_file(out, all, safetensors_plan(entries, dtype, metadata), reader);
    return r;
  }

  // A model directory, written as out.partial and renamed when complete.
  const std::vector<hf_weight_file> files = hf_weight_files(
      entries, dtype, metadata, max_shard_bytes > 0 ? max_shard_bytes : kHfMaxShardBytes);
  const fs::path partial = hf_directory_begin(out);
  try {
    for (const hf_weight_file& f : files) {
      std::vector<tensor_ref> mine;
      for (size_t i : f.entries)
        mine.push_back(all[i]);
      r.bytes += write_file((partial / f.name).string(), mine, f.layout, reader);
    }
    r.files = static_cast<int64_t>(files.size());
    hf_directory_write_files(partial.string(), files, *directory);
    hf_directory_finish(out);
  } catch (...) {
    hf_directory_abandon(out);
    throw;
  }
  return r;
}

checkpoint_weights checkpoint_weights_read(const std::string& checkpoint) {
  checkpoint_weights w;
  w.checkpoint = checkpoint_resolve(checkpoint);
  checkpoint_reader reader(w.checkpoint, checkpoint_manifest_read(w.checkpoint));
  w.step = reader.manifest().step;
  for (const tensor_ref& r : tensors_of(reader.manifest())) {
    checkpoint_tensor_values& t = w.tensors.emplace_back();
    t.name = r.t->name;
    t.shape = r.t->shape;
    t.values.resize(static_cast<size_t>(r.t->elems()));
    read_tensor(reader, r, t.values.data());
  }
  return w;
}
