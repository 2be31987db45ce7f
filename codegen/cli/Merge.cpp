// Merge: merge's flags, and checkpoint_merge with the flags' units and, in a
// model directory, the config.json of the spec the checkpoint was trained
// from and the tokenizer of the token set it trained on.
#include "codegen/cli/Merge.h"

#include <glob.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>
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
#include "runtime/files/hf_directory.h"
#include "runtime/files/hf_model_of.h"
#include "runtime/files/token_manifest.h"

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

// The directory the checkpoint's run was started in: the checkpoint's
// directory less the run's relative checkpoint_dir, or else the checkpoint
// directory's parent.
fs::path run_dir_of(const std::string& step_dir, const checkpoint_manifest& m) {
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
  return run_dir;
}

// Where a path the run was given may be now. An absolute path is itself. A
// relative one was written from where the run was built and started: tried
// from that run's directory, then from here.
std::vector<fs::path> run_path_candidates(const fs::path& run_dir, const std::string& given) {
  const fs::path path(given);
  if (path.is_absolute()) return {path};
  std::error_code ec;
  const fs::path from_run = (run_dir / path).lexically_normal();
  if (fs::absolute(path, ec).lexically_normal() == from_run) return {path};
  return {from_run, path};
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

// The spec of a model directory merged from the checkpoint at step_dir
// (manifest m), and its path: --spec, else the spec its manifest names.
// Throws, before anything is written, when there is none to read or it is
// another model's.
std::pair<Spec, std::string> spec_of(const std::string& step_dir, const checkpoint_manifest& m,
                                     const std::string& spec_flag) {
  const std::string manifest = (fs::path(step_dir) / kCheckpointManifest).string();
  std::string path = spec_flag;
  if (path.empty()) {
    const std::vector<fs::path> candidates = run_path_candidates(run_dir_of(step_dir, m), m.spec);
    std::error_code ec;
    for (const fs::path& p : candidates)
      if (path.empty() && fs::exists(fs::symlink_status(p, ec)) && !ec) path = p.string();
    if (path.empty()) {
      std::vector<std::string> tried;
      for (const fs::path& p : candidates)
        tried.push_back(p.string());
      throw std::runtime_error(fmt::format(
          "{}: \"spec\" names {}, which is not at {}: the model directory's config.json comes "
          "from it; name the spec with --spec FILE (or merge to one .safetensors file)",
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
  return {spec, path};
}

// The first token file of the run's training data: its --data patterns
// (found from the run's directory, then from here), else the spec's
// tokens(...) (from the spec's directory); "" when the data is no token
// files or none is found (*why says which).
std::string first_token_file(const fs::path& run_dir, const checkpoint_manifest& m,
                             const Spec& spec, const std::string& spec_path, std::string* why) {
  std::vector<fs::path> patterns;
  if (m.has_run && !m.run.data.empty()) {
    const std::vector<std::string>& data = m.run.data;
    const bool bin = data.size() > 1 || data[0].ends_with(".bin");
    if (!bin || data[0] == "synthetic") {
      *why = fmt::format("the run's --data {} is no token files", data[0]);
      return "";
    }
    for (const std::string& d : data)
      for (const fs::path& p : run_path_candidates(run_dir, d))
        patterns.push_back(p);
  } else if (spec.train.data.kind != DataKind::Tokens) {
    *why = fmt::format("the spec's data is {}, no token files", to_string(spec.train.data.kind));
    return "";
  } else {
    for (const std::string& d : spec.train.data.paths)
      patterns.push_back(fs::path(d).is_relative() ? fs::path(spec_path).parent_path() / d
                                                   : fs::path(d));
  }
  for (const fs::path& p : patterns) {
    glob_t g{};
    const bool found = ::glob(p.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
    const std::string first = found ? g.gl_pathv[0] : "";
    ::globfree(&g);
    if (found) return first;
  }
  std::vector<std::string> tried;
  for (const fs::path& p : patterns)
    tried.push_back(p.string());
  *why = fmt::format("no file of the run's training data is at {}", fmt::join(tried, " nor "));
  return "";
}

// The tokenizer of the token set the run (its manifest m, at step_dir; an
// empty manifest: the spec's own data) trained on.
void find_tokenizer(spec_origin& o, const std::string& step_dir, const checkpoint_manifest& m) {
  const std::string token_file =
      first_token_file(run_dir_of(step_dir, m), m, o.spec, o.spec_path, &o.no_tokenizer);
  if (!token_file.empty()) o.tokenizer = token_set_tokenizer_of(token_file);
  if (!token_file.empty() && !o.tokenizer)
    o.no_tokenizer =
        fmt::format("{} has no manifest.json of fsdpgen prepare beside it", token_file);
}

}  // namespace

spec_origin checkpoint_spec_origin(const std::string& step_dir, const std::string& spec_flag) {
  const checkpoint_manifest m = checkpoint_manifest_read(step_dir);
  spec_origin o;
  std::tie(o.spec, o.spec_path) = spec_of(step_dir, m, spec_flag);
  find_tokenizer(o, step_dir, m);
  return o;
}

spec_origin spec_origin_of(const std::string& spec_path) {
  spec_origin o;
  try {
    o.spec = read_spec(spec_path);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("--spec {}: {}", spec_path, e.what()));
  }
  o.spec_path = spec_path;
  find_tokenizer(o, spec_path, checkpoint_manifest{});
  return o;
}

int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size, const std::string& spec) {
  // safetensors' spelling of the dtype (the flag's validator accepted the word).
  const DType t = dtype_named(dtype).value_or(DType::FP32);
  const char* st = t == DType::BF16 ? "BF16" : t == DType::FP16 ? "F16" : "F32";
  const int64_t max_bytes =
      max_shard_size.empty() ? 0 : shard_size_bytes(max_shard_size).value_or(0);
  const bool directory = hf_output_is_directory(output);
  try {
    for (const auto& [flag, value] :
         {std::pair{"--spec", spec}, {"--max-shard-size", max_shard_size}})
      if (!directory && !value.empty())
        throw std::runtime_error(fmt::format(
            "{} {}: -o {} names one .safetensors file, which has no config.json and no shards; "
            "name a directory (any other path) for a model directory",
            flag, value, output));
    hf_directory_files files;
    if (directory) {
      const spec_origin o = checkpoint_spec_origin(checkpoint_resolve(checkpoint), spec);
      if (const std::string why = hf_model_unstated(o.spec.model); !why.empty())
        throw std::runtime_error(
            fmt::format("{}: cannot write a model directory for this model: {}", output, why));
      const std::optional<token_set_tokenizer>& tokenizer = o.tokenizer;
      const std::string& why = o.no_tokenizer;
      files = hf_directory_files_of(hf_model_of(o.spec.model), tokenizer, st);
      if (!tokenizer)
        std::fputs(fmt::format("fsdpgen: note: no tokenizer for the model directory: {}; "
                               "config.json's bos and eos by the vocabulary's rule "
                               "(docs/huggingface.md)\n",
                               why)
                       .c_str(),
                   stderr);
    }
    const checkpoint_merged m =
        checkpoint_merge(checkpoint, output, st, directory ? &files : nullptr, max_bytes);
    out(fmt::format(
        "fsdpgen: wrote {}{} from {} (step {}): {} tensors, {} params, {}, {:.2f} MiB\n", output,
        directory ? fmt::format(" ({} weight file{}, {})", m.files, m.files == 1 ? "" : "s",
                                hf_directory_describe(files))
                  : "",
        m.checkpoint, m.step, m.tensors, m.params, st, static_cast<double>(m.bytes) / (1 << 20)));
    return 0;
  } catch (const std::exception& e) {
    error(e.what());
    return kExitSpecError;
  }
}

namespace {

struct MergeFlags {
  std::string checkpoint, output, dtype = "fp32", max_shard_size, spec;
};

}  // namespace

Command add_merge_command(CLI::App& app) {
  auto f = std::make_shared<MergeFlags>();
  CLI::App* merge = app.add_subcommand(
      "merge",
      "write a checkpoint's weights with Hugging Face names: one safetensors file (-o "
      "x.safetensors), or a model directory transformers loads (any other -o)");
  merge
      ->add_option("checkpoint", f->checkpoint,
                   "a step_N checkpoint directory, or a directory of them (its newest)")
      ->required();
  merge
      ->add_option("-o,--output", f->output,
                   "a .safetensors file to write, or else a model directory (new, empty, or a "
                   "model directory it replaces)")
      ->required();
  merge
      ->add_option("--max-shard-size", f->max_shard_size,
                   "a model directory's weight files hold at most this much each (default 5GB; "
                   "e.g. 500MB, 2GiB, bytes), as transformers' save_pretrained")
      ->check(CLI::Validator(
          [](std::string& size) {
            return shard_size_bytes(size)
                       ? std::string()
                       : fmt::format(
                             "'{}' is not a size: bytes, or a number with kB, MB, GB, "
                             "KiB, MiB or GiB (e.g. 5GB)",
                             size);
          },
          "SIZE"));
  merge->add_option("--spec", f->spec,
                    "the spec whose config.json (and token set) the model directory gets "
                    "(default: the one the checkpoint names, found from its run's directory or "
                    "from here)");
  merge
      ->add_option("--dtype", f->dtype,
                   "fp32 (default), bf16 or fp16; also spelled f32, f16, float32, bfloat16, "
                   "float16")
      ->check(CLI::Validator(
          [](std::string& word) {
            return dtype_named(word) ? std::string()
                                     : fmt::format(
                                           "unknown dtype '{}': fp32, bf16 or fp16 (or f32, f16, "
                                           "float32, bfloat16, float16)",
                                           word);
          },
          "DTYPE"));
  return {merge, [f] {
            return run_merge(f->checkpoint, f->output, f->dtype, f->max_shard_size, f->spec);
          }};
}

}  // namespace fsdpgen
