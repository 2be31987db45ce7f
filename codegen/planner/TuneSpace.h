// TuneSpace: the configurations tune searches (codegen/planner/Tune.h): each knob's
// choices for a spec, and how two configurations differ, in the spec
// language's words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/planner/TuneOptions.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Whether --keep pins `knob` (one of kTuneKnobs) to the spec's value.
bool knob_kept(const TuneOptions& o, std::string_view knob);

// The spec language's words for a units policy: "each linear", "group 2 blocks".
std::string units_text(const UnitsSpec& u);

// Each block, each linear and group k blocks (k a power of two below the
// layers), the spec's own first. A spec with explicit units keeps them.
std::vector<UnitsSpec> units_choices(const Spec& spec, const TuneOptions& o);

struct ShardingChoice {
  Sharding sharding;
  int64_t group;
};

// Every strategy; hybrid ones over each shard group 1 < g < world that
// divides the world and either divides ranks_per_node or is a multiple of it.
std::vector<ShardingChoice> sharding_choices(const Spec& spec, int64_t world, int64_t per_node,
                                             const TuneOptions& o);

struct MemoryChoice {
  Recompute recompute;
  Offload offload;
  bool offload_activations;
};

// Recompute none or block, offload none or cpu, activations offloaded only
// with recompute.
std::vector<MemoryChoice> memory_choices(const Spec& spec, const TuneOptions& o);

struct BatchChoice {
  int64_t micro_batch;
  int64_t micro_batches;
};

// micro_batch x micro_batches = `per_rank`: every divisor. With batch
// changes allowed, also powers of two up to twice the spec's per-rank batch.
std::vector<BatchChoice> batch_choices(const Spec& spec, int64_t per_rank, const TuneOptions& o);

// The spec's prefetch first, then none, then each forward and backward
// prefetch pair that prefetches something, at max_inflight 2 and 3.
std::vector<PrefetchSpec> prefetch_choices(const Spec& spec, const TuneOptions& o);

// The spec's reduce dtype, then the param dtype's and fp32 (never narrower
// than the params). Any but the spec's changes the numerics (numerics_changes).
std::vector<DType> reduce_choices(const Spec& spec, const TuneOptions& o);

// How `to` computes other values than `from`, beyond the order of its sums
// (docs/tune.md's classes of knobs): another param, reduce or master dtype;
// gradients communicated in another dtype (the reduce dtype, or fp32 where
// nothing is communicated); micro-batch gradients summed in a 16-bit dtype
// (accumulate reduce = last with a 16-bit reduce dtype) where `from` sums
// them in fp32 or has one micro-batch, or the reverse. Empty: the same math.
std::vector<std::string> numerics_changes(const Spec& from, const Spec& to);

// What `to` changes of `from`, in the spec language's words.
std::vector<std::string> changes_between(const Spec& from, const Spec& to);

// Whether `a` and `b` are one configuration: the same parallel settings,
// units and micro-batch.
bool same_configuration(const Spec& a, const Spec& b);

}  // namespace fsdpgen
