// Merge: `fsdpgen merge`, a checkpoint's weights written with Hugging Face
// names (runtime/files/checkpoint_merge.h).
#pragma once

#include <optional>
#include <string>

#include "codegen/cli/Command.h"
#include "dsl/Spec.h"
#include "runtime/files/token_manifest.h"

namespace fsdpgen {

// Adds `merge` and its flags to `app`.
Command add_merge_command(CLI::App& app);

// What a model's weights were trained from: its spec and the path it was
// read at, and the tokenizer of the token set the run trained on (nullopt:
// no_tokenizer says why there is none).
struct spec_origin {
  Spec spec;
  std::string spec_path;
  std::optional<token_set_tokenizer> tokenizer;
  std::string no_tokenizer;
};

// The checkpoint at step_dir's: `spec_flag` (--spec), else the spec its
// manifest names (found from the run's directory, then from here); the
// token set of the run's --data, else of the spec's tokens(...). Throws
// naming the manifest when the spec cannot be found or read, or describes
// other tensors than the checkpoint's.
spec_origin checkpoint_spec_origin(const std::string& step_dir, const std::string& spec_flag);
// The spec at spec_path's, with the token set of its tokens(...).
spec_origin spec_origin_of(const std::string& spec_path);

// Writes `checkpoint` as one safetensors file `output` in `dtype` (fp32,
// bf16 or fp16, as the flag's validator accepts) when it ends in
// .safetensors, else as a model directory (runtime/files/hf_directory.h):
// weight files of at most `max_shard_size` (default 5GB), config.json of
// `spec` (--spec) or else of the spec the checkpoint's manifest names
// (found from the run's directory or from here), and the special-token ids
// and tokenizer files of the token set the run trained on (its --data, else
// the spec's tokens(...)), or a note saying why there are none. A spec that
// cannot be found or read, or describes other tensors than the
// checkpoint's, is an error before anything is written.
int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size, const std::string& spec);

}  // namespace fsdpgen
