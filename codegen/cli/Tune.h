// Tune: `fsdpgen tune SPEC`, the fastest configuration of a spec that fits,
// chosen by the planner and the cost model (codegen/planner/Tune.h): a ranked table,
// the spec's own rank, the Pareto front of memory against time, the best
// candidate that does not fit, and with -o the winner written as a spec.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "codegen/cli/Command.h"

namespace fsdpgen {

// Adds `tune` and its flags to `app`.
Command add_tune_command(CLI::App& app);

struct TuneCliOptions {
  std::string spec;
  std::optional<int64_t> world;  // replaces parallel.world
  std::string gpu;               // --gpu KIND (empty: not given)
  std::string hardware;          // --hardware PROFILE|NAME (empty: not given)
  std::string output;            // -o: the winner as a spec
  // -o writes the winner only when it is predicted at least this many
  // percent faster per token than the spec as written; else the spec as it
  // is (a smaller gain is within the cost model's error and not worth a
  // change: on this project's 2-core CPU the calibrated step is within 4%,
  // and candidates predicted 1% apart measured in either order).
  double min_gain_pct = 5;
  // --write-candidates DIR: every planned candidate that fits as a spec,
  // DIR/candidate_NNN.fsdp by rank, and DIR/candidates.tsv listing them.
  std::string write_candidates;
  int64_t top = 10;
  std::vector<std::string> keep;  // knobs pinned (codegen/planner/Tune.h's kTuneKnobs)
  bool allow_batch_change = false;
  bool allow_numerics = false;  // also candidates that change the numerics (dtypes)
  std::string worlds;           // "8,16,32": a sweep
  bool time_passes = false;
};

// Returns the exit status: 0 something fits (and -o was written), 4 nothing
// fits (the smallest world that would is named), 1 the spec has errors or
// the output cannot be written, 2 a bad command line.
int run_tune(const TuneCliOptions& options, bool gpu_visible);

}  // namespace fsdpgen
