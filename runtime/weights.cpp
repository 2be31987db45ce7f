// weights: init, load and save of sharded flat parameters.
#include "runtime/weights.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/files/safetensors.h"
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
    init_gpt2_range(values.data(), t.name, p.model.layers, seed, piece.tensor_begin,
                    piece.tensor_end);
    weights_store(c, t.unit, piece.shard_offset, values.data(),
                  static_cast<int64_t>(values.size()));
  }
}

void weights_load(step_context& c, const std::string& path) {
  const program& p = *c.p;
  std::string error;
  try {
    safetensors_file f = safetensors_open(path);
    std::vector<float> values;
    for (int i = 0; i < p.tensor_count; ++i) {
      const program_tensor& t = p.tensors[i];
      const safetensors_tensor* st = f.find(t.name);
      if (!st) st = f.find(strip_prefix(t.name));  // the Hub's gpt2 files omit "transformer."
      if (!st)
        throw runtime_error(fmt::format("{}: no tensor {} (the model has {} tensors)", path, t.name,
                                        p.tensor_count));
      const std::vector<int64_t> want = t.shape();
      if (st->shape != want)
        throw runtime_error(fmt::format("{}: tensor {} has shape [{}], the model needs [{}]", path,
                                        st->name, fmt::join(st->shape, ", "),
                                        fmt::join(want, ", ")));
      shard_piece piece;
      if (!piece_of(c, t, piece)) continue;
      values.resize(static_cast<size_t>(piece.tensor_end - piece.tensor_begin));
      safetensors_read(f, *st, piece.tensor_begin, piece.tensor_end, values.data());
      weights_store(c, t.unit, piece.shard_offset, values.data(),
                    static_cast<int64_t>(values.size()));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "loading weights");
}

void weights_save(step_context& c, const std::string& path, int64_t step) {
  const program& p = *c.p;
  std::vector<safetensors_entry> entries;
  for (int i = 0; i < p.tensor_count; ++i)
    entries.push_back({p.tensors[i].name, p.tensors[i].shape()});
  safetensors_layout layout = safetensors_plan(
      entries, "F32",
      {{"format", "pt"}, {"fsdpgen_spec", p.spec_path}, {"fsdpgen_step", std::to_string(step)}});
  const std::string partial = path + ".partial";
  const bool writer = c.comms.replica_rank == 0;  // one copy of each shard
  std::string error;
  int fd = -1;
  try {
    if (c.comms.rank == 0) {
      fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0)
        throw runtime_error(fmt::format("cannot create {}: {}", partial, std::strerror(errno)));
      safetensors_write_header(fd, partial, layout);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "saving weights");
  try {
    if (writer && fd < 0) {
      fd = ::open(partial.c_str(), O_WRONLY);
      if (fd < 0)
        throw runtime_error(fmt::format("cannot open {}: {}", partial, std::strerror(errno)));
    }
    if (writer) {
      for (int i = 0; i < p.tensor_count; ++i) {
        shard_piece piece;
        if (!piece_of(c, p.tensors[i], piece)) continue;
        const float* m = weights_fp32_shard(c, p.tensors[i].unit) + piece.shard_offset;
        safetensors_write(fd, partial, layout.tensors[static_cast<size_t>(i)], piece.tensor_begin,
                          piece.tensor_end, m);
      }
      if (::fsync(fd) != 0)
        throw runtime_error(fmt::format("cannot sync {}: {}", partial, std::strerror(errno)));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (fd >= 0) ::close(fd);
  try {
    agree_on_error(error, "saving weights");
  } catch (...) {
    if (c.comms.rank == 0) std::remove(partial.c_str());
    throw;
  }
  if (c.comms.rank == 0 && std::rename(partial.c_str(), path.c_str()) != 0)
    error = fmt::format("cannot rename {} to {}: {}", partial, path, std::strerror(errno));
  agree_on_error(error, "saving weights");
}
