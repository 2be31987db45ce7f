// Tune: the search over every configuration of a spec that leaves the
// model's math unchanged (DESIGN §11; with allow_numerics, also those that
// change its dtypes), each candidate planned in full and
// timed by the cost model, pruned by lower bounds; and the rewrite of a spec
// file's text to a chosen configuration, comments and layout kept. What the
// search may vary: codegen/planner/TuneOptions.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/planner/Hardware.h"
#include "codegen/planner/TuneOptions.h"
#include "dsl/Spec.h"

namespace fsdpgen {

struct TuneCandidate {
  Spec spec;
  std::vector<std::string> changes;  // "sharding = shard_grad_op", ... (empty: the spec as written)
  bool own = false;                  // the spec's own configuration
  bool batch_changed = false;        // its global batch differs from the spec's
  std::vector<std::string> numerics;  // how it changes the numerics (empty: the spec's math)
  bool fits = false;
  int64_t device_bytes = 0;  // the plan's device arena
  int64_t host_bytes = 0;    // its host arena
  double step_ms = 0;
  double ms_per_token = 0;  // step_ms per token a rank trains in it: the ranking's key
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;
  double exposed_comm_ms = 0;
  int ops_estimated = 0;  // with a profile: ops it had no measured figure for
  // Lower bounds the search used: memory from the units alone (device), the
  // most bytes the schedule holds live at once (device and host: prefetch's
  // gathered units included) and time (the busiest stream).
  int64_t device_lower_bound_bytes = 0;
  int64_t device_live_bytes = 0;
  int64_t host_live_bytes = 0;
  double step_lower_bound_ms = 0;
};

struct TuneResult {
  std::vector<TuneCandidate> top;           // fitting, least ms_per_token first, at most
                                            // TuneOptions::top (one batch: fastest step first)
  std::optional<TuneCandidate> own;         // the spec's configuration, planned in full
  int own_rank = 0;                         // 1-based in `top`; 0 when not in it
  std::vector<TuneCandidate> pareto;        // planned and fitting: none both faster and smaller
  std::optional<TuneCandidate> best_unfit;  // the fastest (per token) planned that does not fit
  std::string source;                       // the figures used (timeline_source)
  int64_t candidates = 0;                   // valid candidates in the space
  int64_t planned = 0;                      // planned in full
  int64_t fitting = 0;                      // of them, those that fit
  int64_t pruned_memory = 0;                // device or host lower bound over the hardware's room
                                            // (a live peak over it: unless it is best_unfit)
  int64_t pruned_time = 0;                  // time lower bound at or over the top's slowest
  int64_t held_numerics = 0;                // not searched: they change the numerics (and
                                            // allow_numerics is off); not in `candidates`
  std::vector<std::string> notes;           // worlds skipped and why
  // Seconds spent: enumerating and bounding, and planning in full.
  double bound_s = 0, plan_s = 0;
  // Every candidate planned in full (for tests), in planning order.
  std::vector<TuneCandidate> all_planned;
};

// The name of a knob --keep does not know, with the closest one and the
// list; "" when every name is a knob.
std::string unknown_knob_error(const std::vector<std::string>& keep);

// Precondition: `spec` came from check() (or load_spec_file) without errors,
// every name in options.keep is in kTuneKnobs, options.top >= 1 and each of
// options.worlds is positive. Candidates differ from `spec` only in the knobs
// above (and the world, where options.worlds sweeps it); the global batch
// world x micro_batch x micro_batches stays the spec's unless
// options.allow_batch_change, and the numerics unless options.allow_numerics. With options.prune, a
// candidate whose device or host lower bound exceeds the hardware's room (from its units; or its
// schedule's live peak, unless its predicted step would make it best_unfit),
// or whose time lower bound per token is at least the top's slowest once the
// top is full, is not planned: `top` is the same as without pruning.
TuneResult tune(const Spec& spec, const Hardware& hw, const TuneOptions& options);

// `text` (the spec file `name`, which check() read as `from`) with only the
// keys where `to` differs from `from` rewritten: parallel world,
// ranks_per_node, sharding, shard_group, precision.reduce, prefetch,
// recompute, offload and accumulate; the units policy; train.micro_batch.
// Comments and layout elsewhere are kept. Throws std::runtime_error when the
// result does not read back as `to`'s configuration (a bug).
std::string rewrite_spec_text(const std::string& name, const std::string& text, const Spec& from,
                              const Spec& to);

}  // namespace fsdpgen
