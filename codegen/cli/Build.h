// Build: the subcommands that go on past the plan: emit (the generated
// program's source) and build (the training binary).
#pragma once

#include <string>

#include "codegen/cli/Common.h"

namespace fsdpgen {

// emit: writes train.cpp into `dir`, for --target `target` (empty: cuda
// where a GPU is visible, else cpu).
int run_emit(const Common& c, const std::string& target, const std::string& dir);

// build: compiles the binary `output`, keeping the source in `sources_dir`
// when it is not empty; then, unless c.no_layer_check, runs check-layer's
// checks on the spec's custom layers (cached), removing `output` and
// returning 1 when one fails.
int run_build(const Common& c, const std::string& target, const std::string& output,
              const std::string& sources_dir);

}  // namespace fsdpgen
