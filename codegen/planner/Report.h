// Report: what `fsdpgen plan` and `fsdpgen schedule` print of a plan, beside
// each IR's own printer (print_schedule, print_memory_plan, print_timeline),
// which they are made of.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "codegen/planner/Cost.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// "1.50 GiB": the unit the plan's memory lines are in.
std::string gib_text(int64_t bytes);

// `fsdpgen plan`'s report of a planned step on `hw` (chosen for the reason
// `why`): the hardware's figures, the model, each custom layer, the memory
// plan, whether it fits (and changes that do, when it does not) and the
// predicted step. Whether it fits is plan_fits(memory, hw) (codegen/planner/Fit.h).
std::string plan_report(const Spec& spec, const Units& units, const Schedule& schedule,
                        const MemoryPlan& memory, const Timeline& timeline, const Hardware& hw,
                        std::string_view why);

// What `fsdpgen schedule --gpu cpu` prints, embedded in the binary for --print-schedule.
std::string schedule_text(const Schedule& schedule);

}  // namespace fsdpgen
