// ScheduleBuilder: build_schedule, which runs a Builder over the step.
#include "codegen/planner/ScheduleBuilder.h"

namespace fsdpgen::schedule_builder {
namespace {

// The schedule before its first buffer: its units, options and Muon plan.
Schedule start(const Units& units, const ScheduleOptions& options, const StepShape& shape) {
  Schedule s;
  s.units = units;
  s.options = options;
  s.micro_batch = units.spec.train.micro_batch;
  s.muon = shape.muon_plan;
  return s;
}

}  // namespace

Builder::Builder(const Units& units, const ScheduleOptions& options)
    : shape(units, options),
      issue(start(units, options, shape)),
      gradients(shape, issue),
      gathers(shape, issue, persistent),
      micro(shape, issue),
      muon(shape, issue, persistent, gradients) {}

Schedule Builder::run() {
  persistent = persistent_buffers(shape, issue, gradients);
  for (int64_t mb = 0; mb < shape.M; ++mb) {
    issue_forward(*this, static_cast<int>(mb));
    issue_backward(*this, static_cast<int>(mb));
  }
  issue_optimizer(*this);
  return issue.take();
}

}  // namespace fsdpgen::schedule_builder

namespace fsdpgen {

Schedule build_schedule(const Units& units, const ScheduleOptions& options) {
  return schedule_builder::Builder(units, options).run();
}

}  // namespace fsdpgen
