// Common: the flags every subcommand that runs the pipeline shares (the
// spec, --time-passes, --dump-after, the overrides and the hardware), how
// they become a target request and the pipeline's options, and the exit
// statuses of fsdpgen.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "codegen/driver/Pipeline.h"
#include "codegen/driver/Target.h"

namespace fsdpgen {

// Exit statuses: 0 success, 1 the spec has errors or output failed, 2 bad
// command line, 3 internal error (a plan that breaks an invariant: a bug).
inline constexpr int kExitSpecError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInternal = 3;
inline constexpr int kExitDoesNotFit = 4;  // plan: the plan, printed whole, exceeds the device

// The exit status of a pipeline that stopped with `f`.
int exit_status(Failure f);

// Prints `s` on stdout, every byte (a NUL included).
void out(const std::string& s);
// Prints "fsdpgen: error: `s`" and a newline on stderr.
void error(const std::string& s);

struct Common {
  std::string spec_path;
  std::optional<int64_t> world;
  std::optional<int64_t> micro_batch;
  std::string gpu = "h100-sxm";
  CLI::Option* gpu_flag = nullptr;  // its count() says whether --gpu was given
  std::string hardware_arg;         // plan and schedule: --hardware NAME|PROFILE
  CLI::Option* hardware_flag = nullptr;
  bool time_passes = false;
  bool no_reuse = false;
  bool check = false;           // build and emit --check: red zones around every buffer
  bool no_layer_check = false;  // build --no-layer-check: custom layers unchecked (CheckLayer.h)
  bool allow_unrun = false;     // build and emit --allow-unrun (PipelineOptions::allow_unrun)
  std::string dump_after;
  std::string command;          // the subcommand's name
  Pass last_pass = Pass::Cost;  // where it stops

  // Adds the spec, --time-passes and --dump-after to `app`, which runs the
  // passes up to `last`; with `overrides`, --world, --micro-batch, --gpu
  // and --no-reuse too.
  void add_to(CLI::App* app, Pass last, bool overrides);
  // Adds --hardware (plan and schedule).
  void add_hardware_to(CLI::App* app);

  // The pass --dump-after names in `pass` (none without it); false after
  // printing why when it names no pass this subcommand runs.
  bool dump_pass(std::optional<Pass>& pass) const;

  // What --gpu and --hardware ask of resolve_target, with --target `target`.
  TargetRequest target_request(TargetFor purpose, const std::string& target = "") const;

  // The pipeline's options for `target`, up to this subcommand's last pass.
  PipelineOptions options(const Target& target, std::optional<Pass> dump) const;
};

}  // namespace fsdpgen
