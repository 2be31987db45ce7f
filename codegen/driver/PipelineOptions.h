// PipelineOptions: what a command asks of the pipeline (codegen/driver/Pipeline.h):
// the spec's overrides, the target, the pass to stop after and the IR to
// dump, and what emit and build write. Every pass reads them.
#pragma once

#include <optional>
#include <string>

#include "codegen/driver/Pass.h"
#include "codegen/emit/EmitTarget.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Memory.h"
#include "dsl/SpecOverrides.h"

namespace fsdpgen {

struct PipelineOptions {
  SpecOverrides overrides;
  // What the plan is for: the schedule options it implies
  // (schedule_options_for), the backend target support checks, the cost
  // model's figures. Required beyond the front end.
  const Hardware* target = nullptr;
  // Target support's findings are errors when the pipeline goes on to emit,
  // else warnings (the plan of a spec the backend cannot build yet is still useful).
  Pass stop_after = Pass::Cost;
  // build and emit --allow-unrun: CUDA code that has not run on a GPU yet
  // (unrun_features) is built, with a warning per feature, not refused.
  bool allow_unrun = false;
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

}  // namespace fsdpgen
