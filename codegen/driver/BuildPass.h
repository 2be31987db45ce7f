// BuildPass: the pipeline's build pass, which compiles the emitted source
// (codegen/emit/Build.h runs the compiler) into options.output.
#pragma once

#include <string>

#include "codegen/driver/Pipeline.h"

namespace fsdpgen {

// Writes p.source to options.sources_dir (else a temporary directory,
// removed after), compiles it with the spec's custom layers and fills
// p.build_report; a failure names the compiler's command. The compiler's
// errors are the user's when the spec has custom layers (their code), else
// an internal error.
Failure build_pass(const std::string& spec_path, const PipelineOptions& options, Pipeline& p);

}  // namespace fsdpgen
