// TuneOptions: what tune (codegen/planner/Tune.h) may vary and how far it
// looks: the knob groups, those --keep pins, the batch and numerics it may
// change, the worlds it sweeps. The search space (codegen/planner/TuneSpace.h)
// reads them as tune does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen {

// The knob groups tune varies; --keep pins one to the spec's value. What
// each does to the model's math (docs/tune.md's classes):
//   sharding    strategy and shard_group (hybrid groups that divide the world):
//               the same sums, over ranks in another order
//   units       each block, each linear, group k blocks (the spec's own too):
//               the gradient norm's partial sums in another order
//   recompute   none or block: the same forward again, on the same inputs
//   offload     params and activations (activations only with recompute): the
//               optimizer and gradient norm on the host
//   micro_batch micro_batch x accumulate.micro_batches at the same global batch:
//               the same sums over sequences in another order
//   reduce      accumulate.reduce: every or last (with micro-batches): the
//               same sums in another order; with a 16-bit reduce dtype, last
//               sums micro-batches in 16 bits (numerics_changes)
//   prefetch    forward, backward and max_inflight: all-gathers moved in time
//   precision   the reduce dtype: the param dtype or fp32 (never narrower than
//               the param): changes the numerics
// A candidate that changes the numerics (TuneSpace.h's numerics_changes) is
// searched only with TuneOptions::allow_numerics.
inline constexpr std::array<std::string_view, 8> kTuneKnobs = {
    "sharding", "units", "recompute", "offload", "micro_batch", "reduce", "prefetch", "precision"};

struct TuneOptions {
  int64_t top = 10;                 // fitting candidates ranked (>= 1)
  std::vector<std::string> keep;    // knobs of kTuneKnobs pinned to the spec's values
  bool allow_batch_change = false;  // micro_batch x micro_batches free (rows flag the change)
  bool allow_numerics = false;      // also candidates that change the numerics (rows say how)
  std::vector<int64_t> worlds;      // a sweep over these worlds; empty: the spec's world only
  bool prune = true;                // off: every valid candidate planned in full (for tests)
};

}  // namespace fsdpgen
