// Alternatives: when a plan does not fit its device, the configurations at
// the same world that would (tune's search, each planned in full so the
// figures are the planner's own), as plan's report lists them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/planner/Hardware.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// A configuration of the spec that fits at its world, from tune's search.
struct Alternative {
  std::string change;  // tune's changes from the spec: "recompute = block, micro_batch = 2, ..."
  int64_t peak_bytes = 0;
  int64_t host_bytes = 0;  // the host arena (offload)
  double step_ms = 0;
  double tokens_per_s_per_gpu = 0;  // at the spec's world
  int64_t global_batch = 0;         // sequences per step
  bool batch_changed = false;       // global_batch is not the spec's (the row says so)
};

// How many alternatives fitting_alternatives gives at most.
inline constexpr int kAlternatives = 6;

// The configurations tune (codegen/planner/Tune.h) finds that fit `spec` at its own
// world, its reduce dtype and prefetch kept: those that keep the global
// batch (by micro_batch x micro_batches), or where none does, those that
// change it (flagged); fastest per token per GPU first, less one that only
// adds changes to a row before it. Empty if nothing fits at this world.
std::vector<Alternative> fitting_alternatives(const Spec& spec, const Hardware& hw);

}  // namespace fsdpgen
