// TuneBounds: the lower bounds tune prunes by (codegen/planner/Tune.h): a
// candidate's arenas from its units alone, and its step from its busiest
// stream.
#pragma once

#include <cstdint>

#include "codegen/planner/Hardware.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Schedule.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Lower bounds on a candidate's arenas, from its units alone: the
// persistent state (shards, master weights, optimizer state; on the host
// when offloaded, with the gradient shards), plus the larger of what one
// segment's backward holds (its unit's gathered parameters and unsharded
// gradients, the activations a recompute rebuilt, the backward scratch)
// and what lives at the loss (the root's parameters, or every
// unit's where they stay gathered through backward, the micro-batch's saved
// activations, logits and inputs).
struct MemoryBound {
  int64_t device = 0;
  int64_t host = 0;
};

MemoryBound memory_bound(const Units& u, const Spec& spec, const Hardware& hw);

// Whether both bounds fit the hardware's room (without a GPU, one memory).
bool bound_fits(const MemoryBound& m, const Hardware& hw);

// The busiest stream's time when every op runs alone: a lower bound on the
// step (ops on a stream run one after another; a shared link only slows them).
// With `compute_only`, the compute stream's forward, recompute and backward.
double stream_bound_ms(const Schedule& s, const Hardware& hw, bool compute_only);

}  // namespace fsdpgen
