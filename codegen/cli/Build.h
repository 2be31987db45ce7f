// Build: the subcommands that go on past the plan: emit (the generated
// program's source) and build (the training binary).
#pragma once

#include <string>

#include "codegen/cli/Command.h"
#include "codegen/cli/Common.h"

namespace fsdpgen {

// Each adds its subcommand and its flags to `app`; `command_line` is the
// fsdpgen command line as typed, which build's job script names.
Command add_emit_command(CLI::App& app);
Command add_build_command(CLI::App& app, const std::string& command_line);

// emit: writes train.cpp into `dir`, for --target `target` (empty: cuda
// where a GPU is visible, else cpu).
int run_emit(const Common& c, const std::string& target, const std::string& dir);

// What build writes beside the plan's checks.
struct BuildRequest {
  std::string target;       // --target (empty: cuda where a GPU is visible, else cpu)
  std::string output;       // the binary
  std::string sources_dir;  // --sources: where the source stays (empty: nowhere)
  std::string sbatch;       // --sbatch: the Slurm batch script to write (empty: none)
  std::string command;      // the fsdpgen command line, for the script's header
};

// build: compiles the binary r.output, keeping the source in r.sources_dir
// when it is not empty; then, unless c.no_layer_check, runs check-layer's
// checks on the spec's custom layers (cached), removing the binary and
// returning 1 when one fails; then writes the job script (--sbatch).
int run_build(const Common& c, const BuildRequest& r);

}  // namespace fsdpgen
