// EmitPass: the pipeline's emit pass, the generated program's source for
// options.emit (codegen/emit/Emit.h writes it), after notes on what the program
// will meet when it runs.
#pragma once

#include <string>

#include "codegen/driver/PipelineOptions.h"
#include "codegen/planner/Planner.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Precondition: plan holds the schedule and memory plan of `spec`, verified.
// Fills source from them; a failure is the emitter's own consistency check
// (an internal error), printed on stderr.
Failure emit_pass(const std::string& spec_path, const PipelineOptions& options, const Spec& spec,
                  const Plan& plan, std::string& source);

}  // namespace fsdpgen
