// Plan: check, schedule and plan and their flags, each the pipeline up to its
// last pass and a printer of what it left.
#include "codegen/cli/Plan.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "codegen/cli/HfSpec.h"
#include "codegen/driver/Output.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Report.h"
#include "dsl/Layers.h"
#include "dsl/Print.h"

namespace fsdpgen {

// check's target is what a build here targets (as plan's without --gpu):
// target support warns of what that backend cannot build yet. With --hf
// DIR it compares the model with DIR's config.json instead of summing it up.
int run_check(const Common& c, bool print_resolved, const std::string& hf) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  const std::optional<Target> target = resolve_target(c.target_request(TargetFor::Plan));
  if (!target) return kExitUsage;
  const Pipeline p = run_pipeline(c.spec_path, c.options(*target, dump));
  if (p.failure != Failure::None) return exit_status(p.failure);
  const Spec& s = *p.spec;
  if (print_resolved) {
    out(fmt::format("# Resolved by fsdpgen from {}.\n", c.spec_path));
    out(print_spec(s));
    return 0;
  }
  if (!hf.empty()) return run_check_hf(c.spec_path, s, hf);
  const ParallelSpec& par = s.parallel;
  std::string groups = is_hybrid(par.sharding)
                           ? fmt::format(" ({} groups of {})", par.replicas(), par.shard_group)
                           : "";
  out(fmt::format(
      "{}: ok: model {} ({}, {} parameters, {} layers), {} wrap units, {} over {} rank{}{}\n",
      c.spec_path, s.model.name, to_string(s.model.family), model_params(s.model), s.model.layers,
      s.units.units.size(), to_string(par.sharding), par.world, par.world == 1 ? "" : "s", groups));
  return 0;
}

int run_schedule(const Common& c, const std::string& format, const std::string& output) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  const std::optional<Target> target = resolve_target(c.target_request(TargetFor::Plan));
  if (!target) return kExitUsage;
  // On stderr: stdout stays what the binary's --print-schedule prints.
  if (target->defaulted)
    std::fputs(
        fmt::format("fsdpgen: note: schedule for {} ({})\n", target->hardware.name, target->why)
            .c_str(),
        stderr);
  const Pipeline p = run_pipeline(c.spec_path, c.options(*target, dump));
  if (p.failure != Failure::None) return exit_status(p.failure);
  std::string text;
  if (format == "text")
    text = schedule_text(*p.schedule);  // also what a binary's --print-schedule prints
  else if (format == "json")
    text = schedule_json(*p.schedule);
  else
    text = trace_json(*p.schedule, *p.timeline);
  return write_output(output, text) ? 0 : kExitSpecError;
}

int run_plan(const Common& c) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  const std::optional<Target> target = resolve_target(c.target_request(TargetFor::Plan));
  if (!target) return kExitUsage;
  auto started = std::chrono::steady_clock::now();
  const Pipeline p = run_pipeline(c.spec_path, c.options(*target, dump));
  if (p.failure != Failure::None) return exit_status(p.failure);
  const Hardware& hw = target->hardware;
  out(plan_report(*p.spec, *p.units, *p.schedule, *p.memory, *p.timeline, hw, target->why));
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  out(fmt::format("planned in {:.0f} ms\n", ms));
  return plan_fits(*p.memory, hw) ? 0 : kExitDoesNotFit;
}

namespace {

struct CheckFlags {
  Common common;
  bool dump = false;
  std::string hf;
};

struct ScheduleFlags {
  Common common;
  std::string format = "text";
  std::string output;
};

}  // namespace

Command add_check_command(CLI::App& app) {
  auto f = std::make_shared<CheckFlags>();
  CLI::App* check =
      app.add_subcommand("check", "parse and check a spec; with --dump print it fully resolved");
  f->common.add_to(check, Pass::Support, false);
  CLI::Option* dump_flag = check->add_flag(
      "--dump", f->dump, "print the resolved spec (every default filled in) in the spec language");
  check
      ->add_option("--hf", f->hf,
                   "compare the model with a Hugging Face model directory's config.json (or "
                   "that file): every difference at the spec's key; exit 1 when any")
      ->excludes(dump_flag);
  return {check, [f] { return run_check(f->common, f->dump, f->hf); }};
}

Command add_schedule_command(CLI::App& app) {
  auto f = std::make_shared<ScheduleFlags>();
  CLI::App* schedule =
      app.add_subcommand("schedule", "print the static schedule of one training step");
  f->common.add_to(schedule, Pass::Cost, true);
  schedule
      ->add_option("--format", f->format,
                   "text (per stream), json, or trace (Chrome/Perfetto, predicted times)")
      ->check(CLI::IsMember({"text", "json", "trace"}));
  schedule->add_option("-o,--output", f->output, "write to this file instead of stdout");
  f->common.add_hardware_to(schedule);
  return {schedule, [f] { return run_schedule(f->common, f->format, f->output); }};
}

Command add_plan_command(CLI::App& app) {
  auto c = std::make_shared<Common>();
  CLI::App* plan =
      app.add_subcommand("plan", "memory per rank by kind, peak, and predicted step time");
  c->add_to(plan, Pass::Cost, true);
  c->add_hardware_to(plan);
  plan->footer(
      "Exit status: 0 the plan fits the device, 4 it does not (the whole plan is still printed, "
      "with changes that fit), 1 the spec has errors, 2 bad command line, 3 internal error.");
  return {plan, [c] { return run_plan(*c); }};
}

}  // namespace fsdpgen
