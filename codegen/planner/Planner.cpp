// Planner: each step of the plan, in kPlanSteps' order.
#include "codegen/planner/Planner.h"

#include <stdexcept>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Verify.h"

namespace fsdpgen {
namespace {

// Whether the plan already holds what `step` makes, or what a later step
// made from it: a plan brought with a schedule is not lowered again. Verify
// makes nothing and runs on whatever was brought; a timeline brought (tune's,
// predicted before the memory plan) is kept.
bool has_result(PlanStep step, const Plan& p) {
  switch (step) {
    case PlanStep::Lower:
      return p.units || p.schedule || p.memory;
    case PlanStep::Schedule:
      return p.schedule || p.memory;
    case PlanStep::Memory:
      return p.memory.has_value();
    case PlanStep::Verify:
      return false;
    case PlanStep::Cost:
      return p.timeline.has_value();
  }
  return false;
}

Failure run_step(PlanStep step, const Spec& spec, const Hardware& hw, const PlanOptions& o,
                 Plan& p) {
  switch (step) {
    case PlanStep::Lower: {
      // Activations past what the runtime indexes are the spec's to change.
      p.error = activations_size_error(spec, schedule_options_for(hw, spec).flash_attention);
      if (!p.error.empty()) return Failure::User;
      p.units = lower(spec);
      return Failure::None;
    }
    case PlanStep::Schedule:
      p.schedule = build_schedule(*p.units, schedule_options_for(hw, spec));
      return Failure::None;
    case PlanStep::Memory:
      p.memory = plan_memory(*p.schedule, o.memory);
      return Failure::None;
    case PlanStep::Verify:
      // The planner checks its own output; a violation is a bug in fsdpgen.
      p.violations = verify_plan(*p.schedule, *p.memory);
      return p.violations.empty() ? Failure::None : Failure::Internal;
    case PlanStep::Cost:
      // A verified schedule has no cycle and the hardware every figure the
      // model reads: its refusals are bugs.
      try {
        p.timeline = predict(*p.schedule, hw);
        return Failure::None;
      } catch (const std::exception& e) {
        p.error = e.what();
        return Failure::Internal;
      }
  }
  return Failure::Internal;
}

}  // namespace

void run_plan(const Spec& spec, const Hardware& hw, const PlanOptions& o, Plan& p,
              const PlanStepHook& hook) {
  for (PlanStep step : kPlanSteps) {
    if (p.failure != Failure::None || step > o.stop_after) break;
    if (has_result(step, p)) continue;
    auto run = [&] { return run_step(step, spec, hw, o, p); };
    p.failure = hook ? hook(step, run) : run();
  }
  if (p.memory) p.fits = plan_fits(*p.memory, hw);
}

Plan make_plan(const Spec& spec, const Hardware& hw, const PlanOptions& o) {
  Plan p;
  run_plan(spec, hw, o, p);
  return p;
}

}  // namespace fsdpgen
