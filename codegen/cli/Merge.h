// Merge: `fsdpgen merge`, a checkpoint's weights written with Hugging Face
// names (runtime/files/checkpoint_merge.h).
#pragma once

#include <string>

namespace fsdpgen {

// Writes `checkpoint` as one safetensors file `output` in `dtype` (fp32,
// bf16 or fp16, as the flag's validator accepts), or with `max_shard_size`
// a model directory of shards, their index and config.json. config.json
// comes from `spec` (--spec) or else from the spec the checkpoint's manifest
// names, found from the run's directory or from here; a spec that cannot be
// found or read, or describes other tensors than the checkpoint's, is an
// error before anything is written.
int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size, const std::string& spec);

}  // namespace fsdpgen
