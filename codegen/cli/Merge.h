// Merge: `fsdpgen merge`, a checkpoint's weights written with Hugging Face
// names (runtime/files/checkpoint_merge.h).
#pragma once

#include <string>

namespace fsdpgen {

// Writes `checkpoint` as one safetensors file `output` in `dtype` (fp32,
// bf16 or fp16, as the flag's validator accepts), or with `max_shard_size`
// a model directory of shards, their index and config.json.
int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size);

}  // namespace fsdpgen
