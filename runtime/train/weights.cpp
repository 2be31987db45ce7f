// weights: init, load and save of sharded flat parameters.
#include "runtime/train/weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/cpu/step.h"
#include "runtime/files/hf_directory.h"
#include "runtime/files/hf_model_of.h"
#include "runtime/files/safetensors.h"
#include "runtime/files/safetensors_set.h"
#include "runtime/init.h"

namespace {

// The part of a tensor inside this rank's shard of its unit.
bool piece_of(const step_context& c, const program_tensor& t, shard_piece& out) {
  return shard_piece_of(t, c.p->units[t.unit].shard_elems, c.comms.shard_rank, out);
}

std::string strip_prefix(std::string_view name) {
  constexpr std::string_view p = "transformer.";
  return std::string(name.substr(0, p.size()) == p ? name.substr(p.size()) : name);
}

// "spec.fsdp:9" for the line of the spec that sets `key` (its model block's
// `key = ...`), or the spec's path alone when it cannot be read (moved since
// the build) or does not set it (a default).
std::string spec_line_of(const std::string& spec_path, const std::string& key) {
  std::ifstream in(spec_path);
  const std::regex assign("^\\s*" + key + "\\s*=");
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (std::regex_search(line, assign)) return fmt::format("{}:{}", spec_path, line_no);
  }
  return spec_path;
}

// A model directory's config.json against the program's model: every
// difference in one error, each with the spec's line.
void check_hf_config(const program& p, const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::exists(path)) return;
  const std::vector<hf_mismatch> diffs = hf_config_mismatches(path, hf_model_of(p.model));
  if (diffs.empty()) return;
  std::string lines;
  for (const hf_mismatch& d : diffs) {
    const std::string key = d.spec_key.substr(0, d.spec_key.find(' '));
    lines += fmt::format("\n  {} = {}, but {} says {} = {}", d.config_key, d.config_value,
                         spec_line_of(p.spec_path, key), d.spec_key, d.spec_value);
  }
  throw runtime_error(
      fmt::format("{} does not describe the model this program was built for ({} difference{}):{}",
                  path, diffs.size(), diffs.size() == 1 ? "" : "s", lines));
}

// Where each of the program's tensors is in the file set, checked whole
// first: tensors the model needs that the files lack, tensors of another
// shape (both shapes) and tensors the model does not have, each kind named
// (the first few) and counted in one error. Not counted as extra: the
// causal-mask buffers of Hub GPT-2 files (attn.bias, attn.masked_bias),
// rotary inv_freq buffers of older Llama files, and lm_head.weight beside a
// tied model's embedding.
struct found_tensor {
  const safetensors_file* file = nullptr;
  const safetensors_tensor* tensor = nullptr;
};

constexpr size_t kNamedProblems = 4;

std::string named_list(const std::vector<std::string>& items) {
  std::vector<std::string> shown(items.begin(),
                                 items.begin() + std::min(items.size(), kNamedProblems));
  return fmt::format(
      "{}{}", fmt::join(shown, "; "),
      items.size() > shown.size() ? fmt::format("; and {} more", items.size() - shown.size()) : "");
}

bool ignorable_extra(const program& p, const std::string& name) {
  for (std::string_view end : {".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"})
    if (name.size() >= end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0)
      return true;
  return p.model.tied && name == "lm_head.weight";
}

std::vector<found_tensor> match_tensors(const program& p, const safetensors_set& f,
                                        const std::string& path) {
  std::vector<found_tensor> found(static_cast<size_t>(p.tensor_count));
  std::vector<std::string> missing, misshapen, extra;
  std::set<std::string, std::less<>> used;
  for (int i = 0; i < p.tensor_count; ++i) {
    const program_tensor& t = p.tensors[i];
    auto [file, st] = f.find(t.name);
    if (!st)
      std::tie(file, st) = f.find(strip_prefix(t.name));  // the Hub's gpt2 omits "transformer."
    if (!st) {
      missing.push_back(t.name);
      continue;
    }
    used.insert(st->name);
    const std::vector<int64_t> want = t.shape();
    if (st->shape != want)
      misshapen.push_back(fmt::format("{} has shape [{}], the model needs [{}]", st->name,
                                      fmt::join(st->shape, ", "), fmt::join(want, ", ")));
    found[static_cast<size_t>(i)] = {file, st};
  }
  for (const auto& [name, where] : f.where)
    if (!used.contains(name) && !ignorable_extra(p, name)) extra.push_back(name);
  std::vector<std::string> problems;
  if (!missing.empty())
    problems.push_back(fmt::format("{} tensor{} missing: {}", missing.size(),
                                   missing.size() == 1 ? "" : "s", named_list(missing)));
  if (!misshapen.empty())
    problems.push_back(
        fmt::format("{} of another shape: {}", misshapen.size(), named_list(misshapen)));
  if (!extra.empty())
    problems.push_back(fmt::format("{} tensor{} this model does not have: {}", extra.size(),
                                   extra.size() == 1 ? "" : "s", named_list(extra)));
  if (!problems.empty())
    throw runtime_error(fmt::format("{}: not this model's weights ({} tensors): {}", path,
                                    p.tensor_count, fmt::join(problems, "; ")));
  return found;
}

}  // namespace

void weights_store(step_context& c, int unit, int64_t shard_offset, const float* v, int64_t n) {
  const program_unit& u = c.p->units[unit];
  if (u.master >= 0)
    std::memcpy(step_buffer<float>(c, u.master) + shard_offset, v, static_cast<size_t>(n) * 4);
  std::byte* shard = step_buffer<std::byte>(c, u.param_shard) +
                     shard_offset * dtype_size(c.p->parallel.precision.param);
  tensor_convert(shard, c.p->parallel.precision.param, v, dtype_id::fp32, n, false);
}

float* weights_fp32_shard(step_context& c, int unit) {
  const program_unit& u = c.p->units[unit];
  return step_buffer<float>(c, u.master >= 0 ? u.master : u.param_shard);
}

void weights_init(step_context& c, uint64_t seed) {
  const program& p = *c.p;
  std::vector<float> values;
  for (int i = 0; i < p.tensor_count; ++i) {
    const program_tensor& t = p.tensors[i];
    shard_piece piece;
    if (!piece_of(c, t, piece)) continue;
    values.resize(static_cast<size_t>(piece.tensor_end - piece.tensor_begin));
    init_range(values.data(), t.name, init_tensor_rule(t, p.model.layers, p.model.norm_plus_one),
               seed, piece.tensor_begin, piece.tensor_end);
    weights_store(c, t.unit, piece.shard_offset, values.data(),
                  static_cast<int64_t>(values.size()));
  }
}

void weights_load(step_context& c, const std::string& path) {
  const program& p = *c.p;
  std::string error;
  try {
    const safetensors_set f = safetensors_set_open(path);
    if (!f.dir.empty()) check_hf_config(p, f.dir);
    const std::vector<found_tensor> found = match_tensors(p, f, path);
    std::vector<float> values;
    for (int i = 0; i < p.tensor_count; ++i) {
      const program_tensor& t = p.tensors[i];
      shard_piece piece;
      if (!piece_of(c, t, piece)) continue;
      values.resize(static_cast<size_t>(piece.tensor_end - piece.tensor_begin));
      safetensors_read(*found[i].file, *found[i].tensor, piece.tensor_begin, piece.tensor_end,
                       values.data());
      weights_store(c, t.unit, piece.shard_offset, values.data(),
                    static_cast<int64_t>(values.size()));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "loading weights");
}

namespace {

// One safetensors file --save writes: at `partial` while being written,
// renamed to `path` at the end (a model directory's files are renamed with
// their directory instead: path empty); which of the program's tensors it
// holds, in its layout's order.
struct save_file {
  std::string partial, path;
  safetensors_layout layout;
  std::vector<int> tensors;
};

// The files of the save: one F32 safetensors file at `path`, or with
// `directory` the weight files of a model directory in dir.partial.
std::vector<save_file> save_files_of(const program& p, const std::string& path, int64_t step,
                                     const hf_directory_files* directory) {
  std::vector<safetensors_entry> entries;
  for (int i = 0; i < p.tensor_count; ++i)
    entries.push_back({p.tensors[i].name, p.tensors[i].shape()});
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"fsdpgen_spec", p.spec_path}, {"fsdpgen_step", std::to_string(step)}};
  std::vector<save_file> files;
  if (!directory) {
    save_file f{path + ".partial", path, safetensors_plan(entries, "F32", metadata), {}};
    for (int i = 0; i < p.tensor_count; ++i)
      f.tensors.push_back(i);
    files.push_back(std::move(f));
    return files;
  }
  const std::string partial = hf_directory_path(path) + ".partial";
  for (hf_weight_file& w : hf_weight_files(entries, "F32", metadata, kHfMaxShardBytes)) {
    save_file f{(std::filesystem::path(partial) / w.name).string(), "", std::move(w.layout), {}};
    for (size_t i : w.entries)
      f.tensors.push_back(static_cast<int>(i));
    files.push_back(std::move(f));
  }
  return files;
}

// This rank's elements of the file's tensors, through `fd` (rank 0's, from
// the file's creation) or else a descriptor of its own, opened when it has
// any; synced.
void write_pieces(step_context& c, const save_file& f, int fd) {
  const program& p = *c.p;
  const bool own = fd < 0;
  try {
    for (size_t k = 0; k < f.tensors.size(); ++k) {
      const program_tensor& t = p.tensors[f.tensors[k]];
      shard_piece piece;
      if (!piece_of(c, t, piece)) continue;
      if (fd < 0) fd = ::open(f.partial.c_str(), O_WRONLY);
      if (fd < 0)
        throw runtime_error(fmt::format("cannot open {}: {}", f.partial, std::strerror(errno)));
      const float* m = weights_fp32_shard(c, t.unit) + piece.shard_offset;
      safetensors_write(fd, f.partial, f.layout.tensors[k], piece.tensor_begin, piece.tensor_end,
                        m);
    }
    if (fd >= 0 && ::fsync(fd) != 0)
      throw runtime_error(fmt::format("cannot sync {}: {}", f.partial, std::strerror(errno)));
  } catch (...) {
    if (own && fd >= 0) ::close(fd);
    throw;
  }
  if (own && fd >= 0) ::close(fd);
}

}  // namespace

void weights_save(step_context& c, const std::string& path, int64_t step,
                  const hf_directory_files* directory) {
  const program& p = *c.p;
  const std::vector<save_file> files = save_files_of(p, path, step, directory);
  const bool lead = c.comms.rank == 0;
  const bool writer = c.comms.replica_rank == 0;  // one copy of each shard
  // Rank 0 creates and sizes every file (in a fresh dir.partial, with the
  // directory's other files), keeping their descriptors; then each writer
  // writes its pieces; then rank 0 renames.
  std::vector<int> fds(files.size(), -1);
  auto close_all = [&] {
    for (int& fd : fds)
      if (fd >= 0) ::close(std::exchange(fd, -1));
  };
  auto abandon = [&] {
    close_all();
    if (!lead) return;
    if (directory)
      hf_directory_abandon(path);
    else
      ::unlink(files[0].partial.c_str());  // never a directory of that name
  };
  std::string error;
  try {
    if (lead) {
      if (directory) hf_directory_begin(path);
      for (size_t k = 0; k < files.size(); ++k) {
        fds[k] = ::open(files[k].partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fds[k] < 0)
          throw runtime_error(
              fmt::format("cannot create {}: {}", files[k].partial, std::strerror(errno)));
        safetensors_write_header(fds[k], files[k].partial, files[k].layout);
      }
      if (directory) {
        std::vector<hf_weight_file> index;
        for (const save_file& f : files)
          index.push_back({std::filesystem::path(f.partial).filename().string(), {}, f.layout});
        hf_directory_write_files(hf_directory_path(path) + ".partial", index, *directory);
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    agree_on_error(error, "saving weights");
    if (writer)
      for (size_t k = 0; k < files.size(); ++k)
        write_pieces(c, files[k], fds[k]);
  } catch (const agreed_error&) {
    abandon();
    throw;
  } catch (const std::exception& e) {
    error = e.what();
  }
  close_all();
  try {
    agree_on_error(error, "saving weights");
  } catch (...) {
    abandon();
    throw;
  }
  try {
    if (lead && directory)
      hf_directory_finish(path);
    else if (lead && std::rename(files[0].partial.c_str(), path.c_str()) != 0)
      error =
          fmt::format("cannot rename {} to {}: {}", files[0].partial, path, std::strerror(errno));
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) abandon();
  agree_on_error(error, "saving weights");
}
