// weights: the model's parameters in and out of the arena. Initialization
// (GPT-2's rule, independent of sharding), --init-from model.safetensors and
// --save model.safetensors with Hugging Face GPT-2 names; each rank reads and
// writes only the elements of its own shards, and only one replica writes.
#pragma once

#include <string>

#include "runtime/step.h"

// Fills every param shard (and master weights) of this rank.
void weights_init(step_context& c, uint64_t seed);
// Collective: every rank loads its shards from the file (errors agree on all ranks).
void weights_load(step_context& c, const std::string& path);
// Collective: writes path.partial in parallel, renamed to path once every rank finished.
void weights_save(step_context& c, const std::string& path, int64_t step);
