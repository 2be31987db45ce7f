// Merge: checkpoint_merge with the flags' units and a config.json beside the shards.
#include "codegen/cli/Merge.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "codegen/cli/Common.h"
#include "codegen/cli/HfSpec.h"
#include "dsl/Frontend.h"
#include "runtime/files/checkpoint_merge.h"
#include "runtime/files/hf_config.h"

namespace fsdpgen {
namespace {

// A merged model directory's config.json, from the spec the checkpoint names
// (a note instead when it cannot be read there).
void write_hf_config(const std::string& dir, const std::string& spec) {
  const FrontendResult r = load_spec_file(spec);
  if (!r.spec) {
    std::fputs(fmt::format("fsdpgen: note: no config.json in {}: the checkpoint's spec {} cannot "
                           "be read from here\n",
                           dir, spec)
                   .c_str(),
               stderr);
    return;
  }
  std::ofstream(std::filesystem::path(dir) / "config.json")
      << hf_config_text(hf_model_of(r.spec->model));
}

}  // namespace

int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size) {
  // safetensors' spelling of the dtype (the flag's validator accepted the word).
  const DType t = dtype_named(dtype).value_or(DType::FP32);
  const char* st = t == DType::BF16 ? "BF16" : t == DType::FP16 ? "F16" : "F32";
  const int64_t max_bytes =
      max_shard_size.empty() ? 0 : shard_size_bytes(max_shard_size).value_or(0);
  try {
    const checkpoint_merged m = checkpoint_merge(checkpoint, output, st, max_bytes);
    if (max_bytes) write_hf_config(output, m.spec);
    out(fmt::format(
        "fsdpgen: wrote {}{} from {} (step {}): {} tensors, {} params, {}, {:.2f} MiB\n", output,
        max_bytes ? fmt::format(" ({} file{})", m.files, m.files == 1 ? "" : "s") : "",
        m.checkpoint, m.step, m.tensors, m.params, st, static_cast<double>(m.bytes) / (1 << 20)));
    return 0;
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return kExitSpecError;
  }
}

}  // namespace fsdpgen
