// Plan: the subcommands that plan and print, build nothing: check, schedule
// and plan.
#pragma once

#include <string>

#include "codegen/cli/Command.h"
#include "codegen/cli/Common.h"

namespace fsdpgen {

// Each adds its subcommand and its flags to `app`.
Command add_check_command(CLI::App& app);
Command add_schedule_command(CLI::App& app);
Command add_plan_command(CLI::App& app);

// check: the spec's summary, or with `print_resolved` the spec with every
// default filled in, or with --hf DIR its differences from DIR's config.json.
int run_check(const Common& c, bool print_resolved, const std::string& hf);

// schedule: the static schedule in `format` (text, json or trace) to
// `output` (stdout when empty).
int run_schedule(const Common& c, const std::string& format, const std::string& output);

// plan: memory per rank, whether it fits, the predicted step (exit 4 when
// it does not fit).
int run_plan(const Common& c);

}  // namespace fsdpgen
