// checkpoint: collective save and resume of the training state.
#include "runtime/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "runtime/check.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/file_io.h"
#include "runtime/trace.h"
#include "runtime/train/muon_checkpoint.h"
#include "runtime/train/watchdog.h"
#include "runtime/train/weights.h"

namespace fs = std::filesystem;

namespace {

std::string shard_file_name(int64_t shard_rank) {
  return fmt::format("shard_{:05}.bin", shard_rank);
}

bool muon(const program& p) {
  return p.train.optimizer.kind == optimizer_kind::muon;
}

// Optimizer state slices per shard element of a unit (0 without state).
// Muon: AdamW's m and v, with the owners' momentum in m's plane at the
// matrices' elements (runtime/train/muon_checkpoint.h), whatever the compacted
// buffer's size.
int64_t state_planes(const program& p, const program_unit& u) {
  if (muon(p)) return u.shard_elems > 0 && u.param_shard >= 0 ? 2 : 0;
  if (u.optimizer_state < 0 || u.shard_elems == 0) return 0;
  return p.buffers[u.optimizer_state].bytes / (4 * u.shard_elems);
}

MPI_Comm muon_comm(step_context& c) {
  return op_comm(c, stream_id::compute, comm_group::shard);
}

// The optimizer's name in the manifest.
std::string optimizer_name(const program& p) {
  switch (p.train.optimizer.kind) {
    case optimizer_kind::adamw:
      return "adamw";
    case optimizer_kind::sgd:
      return "sgd";
    case optimizer_kind::muon:
      return "muon";
  }
  return "adamw";
}

bool has_shard(const program_unit& u) {
  return u.param_shard >= 0;
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: the data files themselves were synced
  ::fsync(fd);
  ::close(fd);
}

// Writes this rank's shard file: `parts` (checkpoint_parts) from
// `from`, in order, and sets crcs[2u] and crcs[2u + 1] to the CRC-32 of unit
// u's weights and state sections. Allocates nothing unless it fails: the
// writer thread runs it while the steps count allocations.
void write_shard_file(const std::string& path, const std::vector<checkpoint_part>& parts,
                      const std::vector<const std::byte*>& from, std::vector<uint32_t>& crcs) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  try {
    int64_t at = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      const checkpoint_part& part = parts[k];
      file_pwrite_all(fd, path, from[k], part.bytes, at, part.what);
      crcs[2 * static_cast<size_t>(part.unit) + (part.state ? 1 : 0)] =
          checkpoint_crc32(0, from[k], part.bytes);
      at += part.bytes;
    }
    if (::fsync(fd) != 0)
      throw runtime_error(fmt::format("cannot sync {}: {}", path, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0)
    throw runtime_error(fmt::format("cannot close {}: {}", path, std::strerror(errno)));
}

// The manifest of this program's checkpoint, sections in write_shard_file's order.
checkpoint_manifest manifest_of(const program& p, const checkpoint_state& s,
                                const std::vector<uint32_t>& crcs) {
  checkpoint_manifest m;
  m.model = p.model_name;
  m.spec = p.spec_path;
  m.step = s.step;
  m.sequences = s.sequences;
  m.world = p.parallel.world;
  m.shard_group = p.parallel.shard_group;
  m.optimizer = optimizer_name(p);
  m.seed = s.seed;
  m.data = s.data;
  m.has_run = true;
  m.run = s.run;
  m.loss_scale_enabled = s.scaler.enabled;
  m.loss_scale = s.scaler.scale;
  m.loss_scale_finite_steps = s.scaler.finite_steps;
  m.applied_steps = s.scaler.applied_steps;
  m.guard_losses = s.guard_losses;
  m.guard_norms = s.guard_norms;
  m.guard_skips_in_row = s.guard_skips_in_row;
  for (int i = 0; i < p.unit_count; ++i) {
    const program_unit& u = p.units[i];
    checkpoint_unit cu{u.name, u.param_elems, u.shard_elems, state_planes(p, u), {}};
    for (int t = u.first_tensor; t < u.first_tensor + u.tensor_count; ++t) {
      const program_tensor& pt = p.tensors[t];
      cu.tensors.push_back({pt.name, pt.offset_elems, pt.shape()});
    }
    m.units.push_back(std::move(cu));
  }
  const size_t per_rank = 2 * static_cast<size_t>(p.unit_count);
  for (int64_t r = 0; r < p.parallel.shard_group; ++r) {
    checkpoint_shard sh{shard_file_name(r), 0, {}};
    for (int i = 0; i < p.unit_count; ++i) {
      const program_unit& u = p.units[i];
      if (!has_shard(u)) continue;
      const uint32_t* crc =
          crcs.data() + static_cast<size_t>(r) * per_rank + 2 * static_cast<size_t>(i);
      sh.sections.push_back({i, "weights", sh.bytes, 4 * u.shard_elems, crc[0]});
      sh.bytes += 4 * u.shard_elems;
      if (const int64_t planes = state_planes(p, u)) {
        sh.sections.push_back({i, "state", sh.bytes, 4 * planes * u.shard_elems, crc[1]});
        sh.bytes += 4 * planes * u.shard_elems;
      }
    }
    m.shards.push_back(std::move(sh));
  }
  return m;
}

void write_text_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw runtime_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  try {
    file_pwrite_all(fd, path, text.data(), static_cast<int64_t>(text.size()), 0, "the manifest");
    if (::fsync(fd) != 0)
      throw runtime_error(fmt::format("cannot sync {}: {}", path, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

// Removes all but the newest `keep` complete checkpoints and any partial one
// left by an interrupted save (rank 0, after a save succeeded).
int64_t prune(const std::string& dir, int64_t keep, const std::string& just_written) {
  std::vector<std::string> all = checkpoint_list(dir);
  int64_t removed = 0;
  std::error_code ec;
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    if (all[i] == just_written) continue;
    fs::remove_all(all[i], ec);
    removed += ec ? 0 : 1;
  }
  for (const std::string& partial : checkpoint_list_partial(dir))
    fs::remove_all(partial, ec);
  return removed;
}

// Error unless the checkpoint holds exactly this program's tensors and optimizer.
void check_compatible(const program& p, const checkpoint_manifest& m, const std::string& dir) {
  const std::string mine = optimizer_name(p);
  if (m.optimizer != mine)
    throw runtime_error(fmt::format(
        "{}: written with optimizer {}, this binary uses {} (to start a new run from its "
        "weights only: fsdpgen merge {} -o model.safetensors, then --init-from model.safetensors)",
        dir, m.optimizer, mine, dir));
  int64_t checkpoint_tensors = 0;
  for (const checkpoint_unit& u : m.units)
    checkpoint_tensors += static_cast<int64_t>(u.tensors.size());
  if (checkpoint_tensors != p.tensor_count)
    throw runtime_error(fmt::format(
        "{}: written for model {} with {} tensors; this binary trains {} with {} tensors", dir,
        m.model, checkpoint_tensors, p.model_name, p.tensor_count));
}

// Where a tensor of the checkpoint is: its unit and entry.
struct located {
  int unit = -1;
  const checkpoint_tensor* tensor = nullptr;
};

located find_tensor(const checkpoint_manifest& m, const std::string& name) {
  for (size_t u = 0; u < m.units.size(); ++u)
    for (const checkpoint_tensor& t : m.units[u].tensors)
      if (t.name == name) return {static_cast<int>(u), &t};
  return {};
}

}  // namespace

namespace {

// Collective: rank 0 makes DIR/step_N.partial, empty; returns its path.
std::string begin_save(step_context& c, const checkpoint_config& cfg, int64_t step) {
  const watch_outside_step watched(kWatchCheckpointAgree, trace_clock_ns());
  const std::string partial = checkpoint_partial_dir(checkpoint_step_dir(cfg.dir, step));
  std::string error;
  if (c.comms.rank == 0) {
    std::error_code ec;
    fs::create_directories(cfg.dir, ec);
    if (!ec) fs::remove_all(partial, ec);
    if (!ec) fs::create_directory(partial, ec);
    if (ec) error = fmt::format("cannot create {}: {}", partial, ec.message());
  }
  agree_on_error(error, "saving a checkpoint");
  return partial;
}

// One copy of each shard is written: the first replica's.
bool writes_shard(const step_context& c) {
  return c.comms.replica_rank == 0;
}

std::string shard_path(const step_context& c, const std::string& partial) {
  return (fs::path(partial) / shard_file_name(c.comms.shard_rank)).string();
}

// Collective, after every rank wrote its shard file into `partial` (crcs:
// write_shard_file's, `error` its failure or ""): rank 0 gathers the
// checksums, writes the manifest, renames the directory to DIR/step_N and
// prunes to `keep`; a failure anywhere removes `partial` and is an error on
// every rank.
checkpoint_saved complete_save(step_context& c, const checkpoint_config& cfg,
                               const checkpoint_state& s, const std::string& partial,
                               const std::vector<uint32_t>& crcs, std::string error) {
  const watch_outside_step watched(kWatchCheckpointAgree, trace_clock_ns());
  const program& p = *c.p;
  const bool lead = c.comms.rank == 0;
  checkpoint_saved out;
  out.path = checkpoint_step_dir(cfg.dir, s.step);
  std::vector<uint32_t> all(lead ? crcs.size() * static_cast<size_t>(p.parallel.world) : 0);
  MPI_CHECK(MPI_Gather(crcs.data(), static_cast<int>(crcs.size()), MPI_UINT32_T, all.data(),
                       static_cast<int>(crcs.size()), MPI_UINT32_T, 0, MPI_COMM_WORLD));
  try {
    agree_on_error(error, "saving a checkpoint");
  } catch (...) {
    std::error_code ec;
    if (lead) fs::remove_all(partial, ec);
    throw;
  }

  if (lead) {
    try {
      // Ranks 0..S-1 are the first replica, in shard-rank order.
      const checkpoint_manifest m = manifest_of(p, s, all);
      for (const checkpoint_shard& sh : m.shards)
        out.bytes += sh.bytes;
      write_text_file((fs::path(partial) / kCheckpointManifest).string(),
                      checkpoint_manifest_text(m));
      sync_directory(partial);
      // An older save of this step is moved aside, and removed only once the
      // new one is in place (put back if the rename fails).
      std::error_code ec;
      const std::string older = out.path + ".replaced";
      const bool replacing = fs::exists(out.path, ec);
      if (replacing) {
        fs::remove_all(older, ec);
        fs::rename(out.path, older, ec);
        if (ec)
          throw runtime_error(
              fmt::format("cannot move {} aside to {}: {}", out.path, older, ec.message()));
      }
      fs::rename(partial, out.path, ec);
      if (ec) {
        const std::string why = ec.message();
        if (replacing) fs::rename(older, out.path, ec);
        throw runtime_error(fmt::format("cannot rename {} to {}: {}", partial, out.path, why));
      }
      if (replacing) fs::remove_all(older, ec);
      sync_directory(cfg.dir);
      out.removed = prune(cfg.dir, cfg.keep, out.path);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      fs::remove_all(partial, ec);
    }
  }
  agree_on_error(error, "saving a checkpoint");
  return out;
}

}  // namespace

std::vector<checkpoint_part> checkpoint_parts(const program& p) {
  std::vector<checkpoint_part> out;
  for (int i = 0; i < p.unit_count; ++i) {
    const program_unit& u = p.units[i];
    if (!has_shard(u)) continue;
    out.push_back({i, u.master >= 0 ? u.master : u.param_shard, 4 * u.shard_elems, false,
                   "weights of " + std::string(u.name)});
    if (const int64_t planes = state_planes(p, u))
      out.push_back({i, u.optimizer_state, 4 * planes * u.shard_elems, true,
                     "optimizer state of " + std::string(u.name), muon(p)});
  }
  return out;
}

int64_t checkpoint_shard_bytes(const program& p) {
  int64_t bytes = 0;
  for (const checkpoint_part& part : checkpoint_parts(p))
    bytes += part.bytes;
  return bytes;
}

checkpoint_saved checkpoint_save(step_context& c, const checkpoint_config& cfg,
                                 const checkpoint_state& s) {
  const program& p = *c.p;
  const std::string partial = begin_save(c, cfg, s.step);
  std::vector<uint32_t> crcs(2 * static_cast<size_t>(p.unit_count), 0);
  std::string error;
  try {
    if (writes_shard(c)) {
      const watch_outside_step watched(kWatchCheckpointWrite, trace_clock_ns());
      const std::vector<checkpoint_part> parts = checkpoint_parts(p);
      std::vector<const std::byte*> from;
      std::vector<std::vector<float>> put_together;  // Muon's state parts
      for (const checkpoint_part& part : parts) {
        if (!part.muon) {
          from.push_back(step_buffer<std::byte>(c, part.buffer));
          continue;
        }
        put_together.emplace_back(static_cast<size_t>(part.bytes / 4));
        muon_state_to_planes(c, part.unit, put_together.back().data(), muon_comm(c));
        from.push_back(reinterpret_cast<const std::byte*>(put_together.back().data()));
      }
      write_shard_file(shard_path(c, partial), parts, from, crcs);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  return complete_save(c, cfg, s, partial, crcs, error);
}

checkpoint_writer::checkpoint_writer(const program& p)
    : p_(p), parts_(checkpoint_parts(p)), from_(parts_.size(), nullptr) {
  const int64_t bytes = checkpoint_shard_bytes(p);
  const int64_t planned = p.buffers[p.plan.checkpoint_staging_buffer].bytes;
  if (bytes != planned)  // every rank's program is the same: every rank throws
    throw runtime_error(fmt::format(
        "internal error: the plan's checkpoint staging buffer holds {} B, this "
        "rank's checkpoint is {} B (the planner and runtime/train/checkpoint.cpp disagree)",
        planned, bytes));
}

checkpoint_writer::~checkpoint_writer() {
  if (thread_.joinable()) thread_.join();
}

bool checkpoint_writer::available(const program& p) {
  return p.plan.checkpoint_staging_buffer >= 0;
}

double checkpoint_writer::start(step_context& c, const checkpoint_config& cfg,
                                const checkpoint_state& s, const copy_to_host& copy) {
  const auto t0 = std::chrono::steady_clock::now();
  cfg_ = cfg;
  state_ = s;
  partial_ = begin_save(c, cfg, s.step);
  crcs_.assign(2 * static_cast<size_t>(p_.unit_count), 0);
  error_.clear();
  pending_ = true;
  write_s_ = 0;
  if (writes_shard(c)) {
    std::byte* to = step_buffer<std::byte>(c, static_cast<int>(p_.plan.checkpoint_staging_buffer));
    int64_t at = 0;
    for (size_t k = 0; k < parts_.size(); ++k) {
      if (parts_[k].muon)
        muon_state_to_planes(c, parts_[k].unit, reinterpret_cast<float*>(to + at), muon_comm(c));
      else
        copy(parts_[k].buffer, to + at);
      from_[k] = to + at;
      at += parts_[k].bytes;
    }
    const std::string path = shard_path(c, partial_);
    thread_ = std::thread([this, path] {
      const auto w0 = std::chrono::steady_clock::now();
      try {
        write_shard_file(path, parts_, from_, crcs_);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      write_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    });
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

checkpoint_saved checkpoint_writer::finish(step_context& c) {
  if (thread_.joinable()) {
    const watch_outside_step watched(kWatchCheckpointWrite, trace_clock_ns());
    thread_.join();
  }
  pending_ = false;
  checkpoint_saved out = complete_save(c, cfg_, state_, partial_, crcs_, error_);
  out.write_s = write_s_;
  return out;
}

std::string checkpoint_dir_problem(const std::string& dir, bool create) {
  std::error_code created, ec;
  if (create && !fs::create_directories(dir, created) && !fs::is_directory(dir, ec))
    return fmt::format("cannot create the directory {}: {}", dir,
                       created ? created.message() : "a file has its name");
  // The directory itself, or the nearest ancestor that exists.
  fs::path existing = fs::absolute(dir, ec);
  while (!fs::exists(existing, ec) && existing.has_relative_path())
    existing = existing.parent_path();
  if (!fs::is_directory(existing, ec))
    return fmt::format("cannot create the directory {}: {} is not a directory", dir,
                       existing.string());
  if (::access(existing.c_str(), W_OK) != 0)
    return fmt::format("cannot write in {}: {}", existing.string(), std::strerror(errno));
  return "";
}

checkpoint_state checkpoint_load(step_context& c, const std::string& dir,
                                 const checkpoint_manifest& m) {
  const program& p = *c.p;
  checkpoint_state s;
  std::string error;
  try {
    check_compatible(p, m, dir);
    checkpoint_reader reader(dir, m);
    std::vector<float> values;
    for (int i = 0; i < p.unit_count; ++i) {
      const program_unit& u = p.units[i];
      if (!has_shard(u)) continue;
      const int64_t planes = state_planes(p, u);
      // Padding and gaps between tensors stay zero, as a fresh run has them.
      values.assign(static_cast<size_t>(u.shard_elems * (1 + planes)), 0.0f);
      for (int t = u.first_tensor; t < u.first_tensor + u.tensor_count; ++t) {
        const program_tensor& pt = p.tensors[t];
        const located from = find_tensor(m, pt.name);
        const std::vector<int64_t> shape = pt.shape();
        if (!from.tensor)
          throw runtime_error(
              fmt::format("{}: no tensor {} (written for model {})", dir, pt.name, m.model));
        if (from.tensor->shape != shape)
          throw runtime_error(fmt::format("{}: tensor {} has shape [{}], this model's is [{}]", dir,
                                          pt.name, fmt::join(from.tensor->shape, ", "),
                                          fmt::join(shape, ", ")));
        const int64_t from_planes = m.units[static_cast<size_t>(from.unit)].state_planes;
        if (from_planes != planes)
          throw runtime_error(fmt::format(
              "{}: tensor {} has {} optimizer state buffers, this optimizer keeps {} (SGD "
              "momentum on in one run and off in the other?)",
              dir, pt.name, from_planes, planes));
        shard_piece piece;
        if (!shard_piece_of(pt, u.shard_elems, c.comms.shard_rank, piece)) continue;
        const int64_t a = from.tensor->offset + piece.tensor_begin;
        const int64_t b = from.tensor->offset + piece.tensor_end;
        reader.weights(from.unit, a, b, values.data() + piece.shard_offset);
        for (int k = 0; k < planes; ++k)
          reader.state(from.unit, k, a, b,
                       values.data() + (1 + k) * u.shard_elems + piece.shard_offset);
      }
      weights_store(c, i, 0, values.data(), u.shard_elems);
      if (planes && muon(p))
        muon_state_from_planes(c, i, values.data() + u.shard_elems, muon_comm(c));
      else if (planes)
        std::memcpy(step_buffer<float>(c, u.optimizer_state), values.data() + u.shard_elems,
                    static_cast<size_t>(planes * u.shard_elems) * 4);
    }
    s.step = m.step;
    s.sequences = m.sequences;
    s.seed = m.seed;
    s.data = m.data;
    s.scaler = loss_scaler_start(p);
    s.scaler.applied_steps = m.applied_steps;
    s.guard_losses = m.guard_losses;
    s.guard_norms = m.guard_norms;
    s.guard_skips_in_row = m.guard_skips_in_row;
    if (s.scaler.enabled && s.scaler.dynamic && m.loss_scale_enabled) {  // static: the spec's
      s.scaler.scale = m.loss_scale;
      s.scaler.finite_steps = m.loss_scale_finite_steps;
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "resuming from a checkpoint");
  return s;
}
