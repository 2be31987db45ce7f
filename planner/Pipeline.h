// Pipeline: the compiler's passes as one flat list, used by every
// subcommand: load -> lower -> schedule -> memory plan. Each stage's IR is
// kept so commands print the one they need; with `time_passes` each pass's
// wall time is reported on stderr.
#pragma once

#include <optional>
#include <string>

#include "planner/Hardware.h"
#include "planner/Lower.h"
#include "planner/Memory.h"
#include "planner/Schedule.h"
#include "dsl/Frontend.h"

namespace fsdpgen {

struct PipelineOptions {
  SpecOverrides overrides;
  ScheduleOptions schedule;
  // When set, the schedule options are the ones this target implies for the
  // spec (schedule_options_for), replacing `schedule`.
  const Hardware* target = nullptr;
  bool time_passes = false;
  bool frontend_only = false;  // `fsdpgen check`: stop after the spec is checked
};

struct Pipeline {
  std::string diagnostics;  // from the front end
  std::optional<Spec> spec;
  std::optional<Units> units;
  std::optional<Schedule> schedule;
  std::optional<MemoryPlan> memory;
};

// Runs the passes up to the memory plan; stops after the front end when the
// spec has errors (spec is then empty and diagnostics says why).
Pipeline run_pipeline(const std::string& spec_path, const PipelineOptions& options);

}  // namespace fsdpgen
