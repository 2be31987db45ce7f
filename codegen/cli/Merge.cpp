// Merge: checkpoint_merge with the flags' units and, in a model directory,
// the config.json of the spec the checkpoint was trained from.
#include "codegen/cli/Merge.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/cli/Common.h"
#include "codegen/cli/HfSpec.h"
#include "codegen/planner/Lower.h"
#include "dsl/Frontend.h"
#include "dsl/Source.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/checkpoint_merge.h"
#include "runtime/files/file_io.h"
#include "runtime/files/hf_config.h"
#include "runtime/files/hf_model_of.h"

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

// Where the manifest's spec may be. An absolute path is itself. A relative
// one was written from where the run was built and started: tried from that
// run's directory (the checkpoint's directory less the run's relative
// checkpoint_dir, or else the checkpoint directory's parent), then from here.
std::vector<fs::path> spec_candidates(const std::string& step_dir, const checkpoint_manifest& m) {
  const fs::path spec(m.spec);
  if (spec.is_absolute()) return {spec};
  std::error_code ec;
  const fs::path dir = fs::absolute(step_dir, ec).lexically_normal().parent_path();
  fs::path run_dir = dir.parent_path();
  const fs::path written = fs::path(m.run.checkpoint_dir).lexically_normal();
  if (m.has_run && written.is_relative() && !written.empty()) {
    std::vector<fs::path> parts(written.begin(), written.end());
    if (!parts.empty() && parts.back().empty()) parts.pop_back();  // "ckpt/"
    fs::path d = dir;
    bool ends_with = true;
    for (auto it = parts.rbegin(); it != parts.rend() && ends_with; ++it) {
      ends_with = d.filename() == *it;
      d = d.parent_path();
    }
    if (ends_with) run_dir = d;
  }
  const fs::path from_run = (run_dir / spec).lexically_normal();
  if (fs::absolute(spec, ec).lexically_normal() == from_run) return {spec};
  return {from_run, spec};
}

// The spec at `path`, read as a regular file of at most kSourceFileMaxBytes
// (a FIFO or a device is refused before any read) and checked; throws
// naming the file with its diagnostics.
Spec read_spec(const std::string& path) {
  const FrontendResult r = load_spec_text(path, file_read_whole(path, kSourceFileMaxBytes));
  if (!r.spec) {
    std::fputs(r.diagnostics.c_str(), stderr);
    throw std::runtime_error(fmt::format("{}: the spec has errors (above)", path));
  }
  return *r.spec;
}

// The checkpoint's tensors are the spec's (names and shapes), so that the
// config.json written from the spec describes these weights.
void expect_same_tensors(const Spec& spec, const std::string& spec_path,
                         const checkpoint_manifest& m) {
  std::map<std::string, std::vector<int64_t>> in_spec, in_checkpoint;
  for (const FlatUnit& u : lower(spec).units)
    for (const FlatTensor& t : u.tensors)
      in_spec[t.name] = t.shape;
  for (const checkpoint_unit& u : m.units)
    for (const checkpoint_tensor& t : u.tensors)
      in_checkpoint[t.name] = t.shape;
  for (const auto& [name, shape] : in_checkpoint) {
    auto it = in_spec.find(name);
    if (it == in_spec.end() || it->second != shape)
      throw std::runtime_error(fmt::format(
          "{} is not the spec of this checkpoint (model '{}'): its tensor {} is {}, the "
          "checkpoint's is [{}]",
          spec_path, m.model, name,
          it == in_spec.end() ? "absent" : fmt::format("[{}]", fmt::join(it->second, ", ")),
          fmt::join(shape, ", ")));
  }
  if (in_spec.size() != in_checkpoint.size())
    throw std::runtime_error(fmt::format(
        "{} is not the spec of this checkpoint (model '{}'): {} tensors, the checkpoint has {}",
        spec_path, m.model, in_spec.size(), in_checkpoint.size()));
}

// The config.json of a model directory merged from the checkpoint at
// step_dir: from --spec, else from the spec its manifest names. Throws, before
// anything is written, when there is none to read or it is another model's.
std::string config_json_of(const std::string& step_dir, const std::string& spec_flag) {
  const checkpoint_manifest m = checkpoint_manifest_read(step_dir);
  const std::string manifest = (fs::path(step_dir) / kCheckpointManifest).string();
  std::string path = spec_flag;
  if (path.empty()) {
    const std::vector<fs::path> candidates = spec_candidates(step_dir, m);
    std::error_code ec;
    for (const fs::path& p : candidates)
      if (path.empty() && fs::exists(fs::symlink_status(p, ec)) && !ec) path = p.string();
    if (path.empty()) {
      std::vector<std::string> tried;
      for (const fs::path& p : candidates)
        tried.push_back(p.string());
      throw std::runtime_error(fmt::format(
          "{}: \"spec\" names {}, which is not at {}: the model directory's config.json comes "
          "from it; name the spec with --spec FILE (or merge to one .safetensors file, without "
          "--max-shard-size)",
          manifest, m.spec, fmt::join(tried, " nor ")));
    }
  }
  Spec spec;
  try {
    spec = read_spec(path);
    expect_same_tensors(spec, path, m);
  } catch (const std::exception& e) {
    throw std::runtime_error(
        spec_flag.empty() ? fmt::format("{}: \"spec\" names {}: {}; name the spec with --spec FILE",
                                        manifest, m.spec, e.what())
                          : fmt::format("--spec {}: {}", spec_flag, e.what()));
  }
  return hf_config_text(hf_model_of(spec.model));
}

}  // namespace

int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size, const std::string& spec) {
  // safetensors' spelling of the dtype (the flag's validator accepted the word).
  const DType t = dtype_named(dtype).value_or(DType::FP32);
  const char* st = t == DType::BF16 ? "BF16" : t == DType::FP16 ? "F16" : "F32";
  const int64_t max_bytes =
      max_shard_size.empty() ? 0 : shard_size_bytes(max_shard_size).value_or(0);
  try {
    if (!spec.empty() && !max_bytes)
      throw std::runtime_error(fmt::format(
          "--spec {}: a spec gives a model directory's config.json; one .safetensors file has "
          "none (add --max-shard-size, e.g. 5GB, for a model directory)",
          spec));
    const std::string config =
        max_bytes ? config_json_of(checkpoint_resolve(checkpoint), spec) : "";
    const checkpoint_merged m = checkpoint_merge(checkpoint, output, st, max_bytes, config);
    out(fmt::format(
        "fsdpgen: wrote {}{} from {} (step {}): {} tensors, {} params, {}, {:.2f} MiB\n", output,
        max_bytes ? fmt::format(" ({} file{} and config.json)", m.files, m.files == 1 ? "" : "s")
                  : "",
        m.checkpoint, m.step, m.tensors, m.params, st, static_cast<double>(m.bytes) / (1 << 20)));
    return 0;
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return kExitSpecError;
  }
}

}  // namespace fsdpgen
