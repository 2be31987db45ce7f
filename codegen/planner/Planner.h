// Planner: the one entry from a checked spec to a verified plan, its steps
// in their order:
//   lower -> schedule -> memory -> verify -> cost
// make_plan runs them; the driver (codegen/driver/Pipeline.h) runs the same
// call with a hook around each step, which times and dumps it as one of its
// passes; tune (so Fit's alternatives) and calibrate call it too. A plan is filled
// from the first step whose result it lacks, so a caller that already has
// the units or the schedule (tune reuses them across candidates) starts
// there.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/planner/Cost.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"

namespace fsdpgen {

enum class PlanStep { Lower, Schedule, Memory, Verify, Cost };
inline constexpr std::array<PlanStep, 5> kPlanSteps = {
    PlanStep::Lower, PlanStep::Schedule, PlanStep::Memory, PlanStep::Verify, PlanStep::Cost};
inline constexpr std::array<std::string_view, 5> kPlanStepNames = {"lower", "schedule", "memory",
                                                                   "verify", "cost"};

// Why a step (or a pass of the driver) stopped: the user's spec or
// surroundings (exit 1), or a bug in fsdpgen (exit 3).
enum class Failure { None, User, Internal };

struct PlanOptions {
  MemoryOptions memory;  // reuse off (--no-reuse): every buffer its own range
  PlanStep stop_after = PlanStep::Cost;
};

struct Plan {
  std::optional<Units> units;           // lower
  std::optional<Schedule> schedule;     // schedule
  std::optional<MemoryPlan> memory;     // memory
  std::vector<std::string> violations;  // verify: broken invariants (bugs)
  std::optional<Timeline> timeline;     // cost
  // Whether the memory plan's arenas fit the hardware (plan_fits).
  bool fits = false;
  Failure failure = Failure::None;
  // Why the step that failed did, when it is lower's (the activations too
  // large: the user's) or cost's (a refusal: a bug); verify's are `violations`.
  std::string error;
};

// Runs one step: `run` performs it and returns how it ended.
using PlanStepHook = std::function<Failure(PlanStep, const std::function<Failure()>& run)>;

// Fills `plan` from the first step it has no result of, up to
// options.stop_after or the first step that fails (plan.failure says which
// way). `hook`, when given, is called once per step in place of running it.
void run_plan(const Spec& spec, const Hardware& hw, const PlanOptions& options, Plan& plan,
              const PlanStepHook& hook = {});
// A plan from nothing: every step up to options.stop_after.
Plan make_plan(const Spec& spec, const Hardware& hw, const PlanOptions& options = {});

}  // namespace fsdpgen
