// The fsdpgen command line: subcommands over the compiler's passes.
//   fsdpgen check spec.fsdp [--dump]
//   fsdpgen schedule spec.fsdp [--world N] [--micro-batch B] [--format text|json|trace] [-o FILE]
//   fsdpgen plan spec.fsdp [--world N] [--micro-batch B] [--gpu KIND]
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "codegen/Pipeline.h"
#include "dsl/Layers.h"
#include "dsl/Print.h"

namespace fsdpgen {
namespace {

// Exit statuses: 0 success, 1 the spec has errors or output failed, 2 bad command line.
constexpr int kExitSpecError = 1;

void out(const std::string& s) { std::fputs(s.c_str(), stdout); }

// Writes `text` to `path`, or stdout when path is empty or "-".
bool write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    out(text);
    return true;
  }
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) {
    std::fputs(fmt::format("fsdpgen: error: cannot write '{}'\n", path).c_str(), stderr);
    return false;
  }
  return true;
}

struct Common {
  std::string spec_path;
  std::optional<int64_t> world;
  std::optional<int64_t> micro_batch;
  bool time_passes = false;

  void add_to(CLI::App* app, bool overrides) {
    app->add_option("spec", spec_path, "the .fsdp spec file")->required();
    if (!overrides) return;
    app->add_option("--world", world, "number of ranks (replaces the spec's parallel.world)");
    app->add_option("--micro-batch", micro_batch, "sequences per rank per micro-batch (replaces train.micro_batch)");
    app->add_flag("--time-passes", time_passes, "print each compiler pass's wall time on stderr");
  }

  // Runs the passes; prints the diagnostics; empty when the spec has errors.
  std::optional<Pipeline> run(bool frontend_only = false) const {
    PipelineOptions o;
    o.frontend_only = frontend_only;
    o.overrides.world = world;
    o.overrides.micro_batch = micro_batch;
    o.time_passes = time_passes;
    Pipeline p = run_pipeline(spec_path, o);
    std::fputs(p.diagnostics.c_str(), stderr);
    if (!p.spec) return std::nullopt;
    return p;
  }
};

int run_check(const Common& c, bool dump) {
  auto p = c.run(true);
  if (!p) return kExitSpecError;
  const Spec& s = *p->spec;
  if (dump) {
    out(fmt::format("# Resolved by fsdpgen from {}.\n", c.spec_path));
    out(print_spec(s));
    return 0;
  }
  const ParallelSpec& par = s.parallel;
  std::string groups = is_hybrid(par.sharding) ? fmt::format(" ({} groups of {})", par.replicas(), par.shard_group) : "";
  out(fmt::format("{}: ok: model {} ({}, {} parameters, {} layers), {} wrap units, {} over {} rank{}{}\n", c.spec_path,
                  s.model.name, to_string(s.model.family), model_params(s.model), s.model.layers, s.units.units.size(),
                  to_string(par.sharding), par.world, par.world == 1 ? "" : "s", groups));
  return 0;
}

int run_schedule(const Common& c, const std::string& format, const std::string& output) {
  auto p = c.run();
  if (!p) return kExitSpecError;
  std::string text;
  if (format == "text") text = print_units(*p->units) + print_schedule(*p->schedule);
  else if (format == "json") text = schedule_json(*p->schedule);
  else text = schedule_json(*p->schedule);
  return write_output(output, text) ? 0 : kExitSpecError;
}

int run_plan(const Common& c) {
  auto p = c.run();
  if (!p) return kExitSpecError;
  const Spec& s = *p->spec;
  out(fmt::format("plan of {} ({} parameters; {} padded elements in {} units)\n", s.model.name, p->units->total_params,
                  p->units->total_padded_elems, p->units->units.size()));
  out(print_memory_plan(*p->schedule, *p->memory));
  return 0;
}

}  // namespace
}  // namespace fsdpgen

int main(int argc, char** argv) {
  using fsdpgen::Common;
  CLI::App app{"fsdpgen: compiles a .fsdp spec into a specialized FSDP training binary"};
  app.require_subcommand(1);

  Common check_args, schedule_args, plan_args;
  bool dump = false;
  CLI::App* check = app.add_subcommand("check", "parse and check a spec; with --dump print it fully resolved");
  check_args.add_to(check, false);
  check->add_flag("--dump", dump, "print the resolved spec (every default filled in) in the spec language");

  std::string format = "text", output;
  CLI::App* schedule = app.add_subcommand("schedule", "print the static schedule of one training step");
  schedule_args.add_to(schedule, true);
  schedule->add_option("--format", format, "text (per stream), json, or trace (Chrome/Perfetto, predicted times)")
      ->check(CLI::IsMember({"text", "json", "trace"}));
  schedule->add_option("-o,--output", output, "write to this file instead of stdout");

  CLI::App* plan = app.add_subcommand("plan", "memory per rank by kind, peak, and predicted step time");
  plan_args.add_to(plan, true);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\nRun 'fsdpgen --help' for usage.\n", e.what()).c_str(), stderr);
    return 2;
  }
  if (check->parsed()) return fsdpgen::run_check(check_args, dump);
  if (schedule->parsed()) return fsdpgen::run_schedule(schedule_args, format, output);
  if (plan->parsed()) return fsdpgen::run_plan(plan_args);
  return 2;
}
