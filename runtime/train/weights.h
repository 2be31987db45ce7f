// weights: the model's parameters in and out of the arena. Initialization
// (GPT-2's rule, independent of sharding), --init-from (a .safetensors file,
// a Hugging Face model directory, sharded or not, or its index file; a
// directory's config.json is checked against the model first) and --save
// (model.safetensors, or a model directory) with Hugging Face names; each rank reads and writes
// only the elements of its own shards, and only one replica writes.
#pragma once

#include <string>

#include "runtime/files/hf_directory.h"
#include "runtime/step_context.h"

// Stores n fp32 weights at shard_offset of this rank's shard of `unit`: into
// its master weights (when it has them) and, converted, its param shard.
void weights_store(step_context& c, int unit, int64_t shard_offset, const float* v, int64_t n);
// The fp32 weights of this rank's shard of `unit` (shard_elems): its master
// weights, or its param shard when params are fp32.
float* weights_fp32_shard(step_context& c, int unit);

// Fills every param shard (and master weights) of this rank.
void weights_init(step_context& c, uint64_t seed);
// Collective: every rank loads its shards from the file, directory or index
// (errors agree on all ranks).
void weights_load(step_context& c, const std::string& path);
// Collective: writes path.partial in parallel (F32), renamed to path once
// every rank finished. With `directory`, path is a model directory
// (runtime/files/hf_directory.h): its weight files, sharded above
// kHfMaxShardBytes, and `directory`'s files, in path.partial, renamed (a
// model directory there replaced) once every rank finished.
void weights_save(step_context& c, const std::string& path, int64_t step,
                  const hf_directory_files* directory = nullptr);
