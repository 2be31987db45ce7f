// BuildPass: the pipeline's build pass, which compiles the emitted source
// (codegen/emit/Build.h runs the compiler) into options.output.
#pragma once

#include <string>

#include "codegen/driver/PipelineOptions.h"
#include "codegen/planner/Planner.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Writes source (the emit pass's) to options.sources_dir (else a temporary
// directory, removed after), compiles it with the custom layers of `model`
// and fills report; a failure names the compiler's command. The compiler's
// errors are the user's when the spec has custom layers (their code), else
// an internal error.
Failure build_pass(const std::string& spec_path, const PipelineOptions& options,
                   const ModelSpec& model, const std::string& source, std::string& report);

}  // namespace fsdpgen
