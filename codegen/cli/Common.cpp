// Common: the pipeline subcommands' shared flags.
#include "codegen/cli/Common.h"

#include <cstdio>

#include <fmt/format.h>

#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

// build --check: each red zone, one buffer alignment (codegen/planner/Memory.h).
constexpr int64_t kRedZoneBytes = 256;

// The passes up to `last`, in order.
std::vector<std::string_view> passes(Pass last) {
  return {kPassNames.begin(), kPassNames.begin() + static_cast<int>(last) + 1};
}

std::string pass_list(Pass last) {
  std::string s;
  for (std::string_view n : passes(last))
    s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace

int exit_status(Failure f) {
  return f == Failure::None ? 0 : f == Failure::User ? kExitSpecError : kExitInternal;
}

void out(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);  // all of it: a sample's bytes may hold a NUL
}

void error(const std::string& s) {
  std::fputs(fmt::format("fsdpgen: error: {}\n", s).c_str(), stderr);
}

void Common::add_to(CLI::App* app, Pass last, bool overrides) {
  command = app->get_name();
  last_pass = last;
  app->add_option("spec", spec_path, "the .fsdp spec file")->required();
  app->add_flag("--time-passes", time_passes, "print each compiler pass's wall time on stderr");
  app->add_option("--dump-after", dump_after,
                  fmt::format("print on stderr the IR after this pass: {}", pass_list(last)));
  if (!overrides) return;
  app->add_option("--world", world, "number of ranks (replaces the spec's parallel.world)");
  app->add_option("--micro-batch", micro_batch,
                  "sequences per rank per micro-batch (replaces train.micro_batch)");
  gpu_flag =
      app->add_option("--gpu", gpu,
                      "hardware the cost model and memory limits use: " + hardware_name_list() +
                          " (default: h100-sxm; plan and schedule without --gpu: what "
                          "a build here targets, cpu where no GPU is visible)");
  app->add_flag("--no-reuse", no_reuse,
                "for debugging: give every buffer its own memory, none reused after a free");
}

void Common::add_hardware_to(CLI::App* app) {
  hardware_flag = app->add_option(
      "--hardware", hardware_arg,
      "plan with a hardware profile that `fsdpgen calibrate` measured (a .json file), or a "
      "built-in hardware by name (as --gpu)");
}

bool Common::dump_pass(std::optional<Pass>& pass) const {
  pass.reset();
  if (dump_after.empty()) return true;
  pass = pass_named(dump_after);
  if (pass && *pass <= last_pass) return true;
  std::string msg = fmt::format("fsdpgen: error: --dump-after {}: ", dump_after);
  if (pass)
    msg += fmt::format("{} stops after {};", command, to_string(last_pass));
  else if (std::string close = closest_match(dump_after, passes(last_pass)); !close.empty())
    msg += fmt::format("no such pass; did you mean '{}'?", close);
  else
    msg += "no such pass;";
  std::fputs(
      fmt::format("{} {} runs {}\n", msg, command, quoted_choices(passes(last_pass), " and "))
          .c_str(),
      stderr);
  return false;
}

TargetRequest Common::target_request(TargetFor purpose, const std::string& target) const {
  TargetRequest r;
  r.purpose = purpose;
  r.target = target;
  r.gpu = gpu;
  r.gpu_given = gpu_flag && gpu_flag->count() > 0;
  r.hardware = hardware_arg;
  r.hardware_given = hardware_flag && hardware_flag->count() > 0;
  return r;
}

PipelineOptions Common::options(const Target& target, std::optional<Pass> dump) const {
  PipelineOptions o;
  o.target = &target.hardware;
  o.emit = target.emit;
  o.stop_after = last_pass;
  o.dump_after = dump;
  o.overrides.world = world;
  o.overrides.micro_batch = micro_batch;
  o.time_passes = time_passes;
  o.memory.reuse = !no_reuse;
  o.memory.red_zone_bytes = check ? kRedZoneBytes : 0;
  o.sanitize = check;
  o.allow_unrun = allow_unrun;
  return o;
}

}  // namespace fsdpgen
