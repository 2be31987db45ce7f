// Calibrate: `fsdpgen calibrate`, the command-line side of measuring a
// machine. It plans the given specs (or a standard sweep of shapes) for the
// target, writes the request of what their steps run
// (codegen/planner/Calibrated.h's calibration_request), and runs the calibration
// binary (runtime/calibrate/, `fsdpgen-calibrate`, built with fsdpgen) on this node's
// ranks, which measures each entry through the runtime and writes the profile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "codegen/cli/Command.h"

namespace fsdpgen {

// Adds `calibrate` and its flags to `app`.
Command add_calibrate_command(CLI::App& app);

struct CalibrateOptions {
  std::vector<std::string> specs;  // none: the standard sweep
  std::string output;              // the profile to write
  std::string target;              // "cpu", "cuda", or "": cuda where a GPU is visible
  std::string gpu = "h100-sxm";    // cuda: the built-in hardware the profile refines
  int64_t ranks = 0;    // ranks on this node; 0: as many as the plans use, up to the cores/GPUs
  bool quick = false;   // fewer runs per entry (CI, trying it out)
  std::string request;  // write the request here and stop (to run under srun)
  int64_t nodes = 1;    // with request: the nodes it runs on, `ranks` on each
  std::optional<int64_t> world;        // replaces each spec's parallel.world
  std::optional<int64_t> micro_batch;  // replaces each spec's train.micro_batch
};

// Returns the exit status (0, 1 for bad specs or a failed measurement, 2 for
// bad options); reports on stdout and stderr.
int run_calibrate(const CalibrateOptions& options, bool gpu_visible);

}  // namespace fsdpgen
