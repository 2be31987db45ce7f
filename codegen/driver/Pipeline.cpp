// Pipeline: the flat list of passes, each timed and dumped the same way.
#include "codegen/driver/Pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>

#include <fmt/format.h>

#include "codegen/driver/BuildPass.h"
#include "codegen/driver/EmitPass.h"
#include "codegen/driver/Output.h"
#include "codegen/planner/TargetSupport.h"
#include "dsl/Print.h"

namespace fsdpgen {
namespace {

// Diagnostics with no source location ("error: cannot read spec file ...")
// get the program's name in front, as clang's do.
std::string with_program_name(const std::string& diagnostics) {
  std::string out;
  std::istringstream in(diagnostics);
  for (std::string line; std::getline(in, line);) {
    for (const char* kind : {"error: ", "warning: ", "note: "})
      if (line.starts_with(kind)) line = "fsdpgen: " + line;
    out += line + "\n";
  }
  return out;
}

Failure frontend(const std::string& spec_path, const PipelineOptions& o, Pipeline& p) {
  FrontendResult r = load_spec_file(spec_path, o.overrides);
  print_stderr(with_program_name(r.diagnostics));
  p.spec = std::move(r.spec);
  if (p.spec && o.memory.red_zone_bytes > 0) p.spec->model.custom_red_zones = true;
  return p.spec ? Failure::None : Failure::User;
}

// Errors when the command goes on to emit; warnings for those that only plan.
Failure support(const std::string& spec_path, const PipelineOptions& o, Pipeline& p) {
  p.unsupported = unsupported_features(*p.spec, *o.target, o.allow_unrun);
  const bool emitting = o.stop_after >= Pass::Emit;
  if (o.allow_unrun)
    for (const std::string& feature : unrun_features(*p.spec, *o.target))
      print_stderr(fmt::format(
          "fsdpgen: warning: {}: --allow-unrun: {} on GPUs: its CUDA code has not run on a GPU "
          "yet; compare the first steps with the CPU target's\n",
          spec_path, feature));
  for (const std::string& why : p.unsupported)
    print_stderr(fmt::format("fsdpgen: {}: {}: the {} backend cannot build this spec{}: {}\n",
                             emitting ? "error" : "warning", spec_path, backend_name(*o.target),
                             emitting ? "" : " yet", why));
  return emitting && !p.unsupported.empty() ? Failure::User : Failure::None;
}

// What a planner step that failed says: the user's error with the spec's
// path, or the bug.
void report(PlanStep step, const std::string& spec_path, const Pipeline& p) {
  if (p.failure == Failure::None) return;
  if (step == PlanStep::Verify) {
    for (const std::string& e : p.violations)
      print_stderr(fmt::format("fsdpgen: internal error: {}\n", e));
    print_stderr("fsdpgen: the plan breaks its invariants; please report this with the spec\n");
  } else if (p.failure == Failure::User) {
    print_stderr(fmt::format("fsdpgen: error: {}: {}\n", spec_path, p.error));
  } else {
    print_stderr(fmt::format("fsdpgen: internal error: {}\n", p.error));
  }
}

std::string support_ir(const Pipeline& p, const PipelineOptions& o) {
  if (p.unsupported.empty())
    return fmt::format("the {} backend can build this spec\n", backend_name(*o.target));
  std::string out;
  for (const std::string& why : p.unsupported)
    out += fmt::format("the {} backend cannot build this spec: {}\n", backend_name(*o.target), why);
  return out;
}

std::string verify_ir(const Pipeline& p) {
  if (p.violations.empty()) return "the plan keeps every invariant\n";
  std::string out;
  for (const std::string& v : p.violations)
    out += v + "\n";
  return out;
}

// The IR a pass leaves, in the printer each IR already has.
std::string ir_after(Pass pass, const Pipeline& p, const PipelineOptions& o) {
  switch (pass) {
    case Pass::Frontend:
      return print_spec(*p.spec);
    case Pass::Support:
      return support_ir(p, o);
    case Pass::Lower:
      return print_units(*p.units);
    case Pass::Schedule:
      return print_schedule(*p.schedule);
    case Pass::Memory:
      return print_memory_plan(*p.schedule, *p.memory);
    case Pass::Verify:
      return verify_ir(p);
    case Pass::Cost:
      return print_timeline(*p.schedule, *p.timeline);
    case Pass::Emit:
      return p.source;
    case Pass::Build:
      return p.build_report;
  }
  return "";
}

// Runs one pass when the pipeline has got that far: timed with
// --time-passes, its IR printed with --dump-after.
class Runner {
 public:
  explicit Runner(const PipelineOptions& o) : o_(o) {}

  template <class Body>
  void operator()(Pass pass, Body body) {
    if (p_.failure != Failure::None || pass > o_.stop_after) return;
    const auto start = std::chrono::steady_clock::now();
    p_.failure = body();
    if (o_.time_passes)
      print_stderr(fmt::format(
          "pass {:<10} {:8.2f} ms\n", to_string(pass),
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count()));
    if (p_.failure == Failure::None && o_.dump_after == pass)
      print_stderr(fmt::format("*** IR after {} ***\n{}", to_string(pass), ir_after(pass, p_, o_)));
  }

  Pipeline& pipeline() { return p_; }

 private:
  const PipelineOptions& o_;
  Pipeline p_;
};

}  // namespace

Pipeline run_pipeline(const std::string& spec_path, const PipelineOptions& o) {
  Runner run(o);
  Pipeline& p = run.pipeline();
  run(Pass::Frontend, [&] { return frontend(spec_path, o, p); });
  run(Pass::Support, [&] { return support(spec_path, o, p); });
  if (p.failure == Failure::None && o.stop_after >= Pass::Lower) {
    PlanOptions po;
    po.memory = o.memory;
    po.stop_after =
        o.stop_after >= Pass::Cost
            ? PlanStep::Cost
            : static_cast<PlanStep>(static_cast<int>(o.stop_after) - static_cast<int>(Pass::Lower));
    run_plan(*p.spec, *o.target, po, p, [&](PlanStep step, const std::function<Failure()>& body) {
      run(pass_of(step), [&] {
        p.failure = body();
        report(step, spec_path, p);
        return p.failure;
      });
      return p.failure;
    });
  }
  run(Pass::Emit, [&] { return emit_pass(spec_path, o, *p.spec, p, p.source); });
  run(Pass::Build,
      [&] { return build_pass(spec_path, o, p.spec->model, p.source, p.build_report); });
  return std::move(p);
}

}  // namespace fsdpgen
