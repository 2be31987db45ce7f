// EmitPass: the pipeline's emit pass, the generated program's source for
// options.emit (codegen/emit/Emit.h writes it), after notes on what the program
// will meet when it runs.
#pragma once

#include <string>

#include "codegen/driver/Pipeline.h"

namespace fsdpgen {

// Fills p.source from p.schedule and p.memory; a failure is the emitter's
// own consistency check (an internal error), printed on stderr.
Failure emit_pass(const std::string& spec_path, const PipelineOptions& options, Pipeline& p);

}  // namespace fsdpgen
