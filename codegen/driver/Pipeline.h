// Pipeline: the compiler's passes as one flat list, used by every subcommand:
//   frontend -> support -> lower -> schedule -> memory -> verify -> cost -> emit -> build
// A command chooses the pass to stop after; each pass's IR is kept so the
// command prints the one it needs. Passes report on stderr as they finish
// (diagnostics, target support, the verifier's findings); `time_passes`
// times each one and `dump_after` prints one's IR there (LLVM's
// -print-after). The driver (fsdpgen_driver) stands above the planner and
// the emitter so that every pass, emit and build too, is called from here.
// lower -> cost are the planner's steps (codegen/planner/Planner.h), run by
// its one entry with a hook that makes each of them a pass. The passes and
// their names are codegen/driver/Pass.h; what a command asks,
// codegen/driver/PipelineOptions.h; emit and build are codegen/driver/EmitPass.h
// and codegen/driver/BuildPass.h, which read the IRs they need as values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "codegen/driver/Pass.h"
#include "codegen/driver/PipelineOptions.h"
#include "codegen/planner/Planner.h"
#include "dsl/Frontend.h"

namespace fsdpgen {

// Why a pass stopped the pipeline: Failure (codegen/planner/Planner.h).
// Each pass's IR: lower to cost's are the Plan's (its units, schedule,
// memory, violations, timeline), and `failure` is the pipeline's.
struct Pipeline : Plan {
  std::optional<Spec> spec;              // frontend: empty when the spec has errors
  std::vector<std::string> unsupported;  // support: why the backend cannot build the spec
  std::string source;                    // emit: the generated program
  std::string build_report;              // build: what was built, for --dump-after build
};

// Runs the passes up to options.stop_after, or until one fails.
Pipeline run_pipeline(const std::string& spec_path, const PipelineOptions& options);

}  // namespace fsdpgen
