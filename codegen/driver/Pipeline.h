// Pipeline: the compiler's passes as one flat list, used by every subcommand:
//   frontend -> support -> lower -> schedule -> memory -> verify -> cost -> emit -> build
// A command chooses the pass to stop after; each pass's IR is kept so the
// command prints the one it needs. Passes report on stderr as they finish
// (diagnostics, target support, the verifier's findings); `time_passes`
// times each one and `dump_after` prints one's IR there (LLVM's
// -print-after). The driver (fsdpgen_driver) stands above the planner and
// the emitter so that every pass, emit and build too, is called from here.
// lower -> cost are the planner's steps (codegen/planner/Planner.h), run by
// its one entry with a hook that makes each of them a pass.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/emit/Emit.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Planner.h"
#include "dsl/Frontend.h"

namespace fsdpgen {

enum class Pass { Frontend, Support, Lower, Schedule, Memory, Verify, Cost, Emit, Build };
inline constexpr std::array<std::string_view, 9> kPassNames = {
    "frontend", "support", "lower", "schedule", "memory", "verify", "cost", "emit", "build"};
inline std::string_view to_string(Pass p) {
  return kPassNames[static_cast<int>(p)];
}
std::optional<Pass> pass_named(std::string_view name);
// The planner's steps are the passes from lower to cost, in its order.
inline constexpr Pass pass_of(PlanStep step) {
  return static_cast<Pass>(static_cast<int>(Pass::Lower) + static_cast<int>(step));
}
static_assert(kPassNames[static_cast<int>(pass_of(PlanStep::Lower))] == kPlanStepNames.front() &&
              kPassNames[static_cast<int>(pass_of(PlanStep::Cost))] == kPlanStepNames.back() &&
              kPassNames[static_cast<int>(pass_of(PlanStep::Verify))] == "verify");

// Why a pass stopped the pipeline: Failure (codegen/planner/Planner.h).

struct PipelineOptions {
  SpecOverrides overrides;
  // What the plan is for: the schedule options it implies
  // (schedule_options_for), the backend target support checks, the cost
  // model's figures. Required beyond the front end.
  const Hardware* target = nullptr;
  // Target support's findings are errors when the pipeline goes on to emit,
  // else warnings (the plan of a spec the backend cannot build yet is still useful).
  Pass stop_after = Pass::Cost;
  MemoryOptions memory;            // reuse off (--no-reuse): every buffer its own range
  std::optional<Pass> dump_after;  // at most stop_after
  bool time_passes = false;
  // emit: the runtime the program is for (codegen/driver/Target.h resolves it
  // together with `target`).
  EmitTarget emit;
  // build: the binary to write; the directory the source is compiled in
  // (empty: a temporary one, removed after); AddressSanitizer on (--check).
  std::string output;
  std::string sources_dir;
  bool sanitize = false;
};

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
