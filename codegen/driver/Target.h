// Target: what a command plans and builds for, resolved once from its flags:
// the hardware the planner plans for and the program emit writes (the CPU
// runtime, or the CUDA runtime for a GPU). Without --gpu, --hardware or
// --target it is what a build here targets: a GPU where one is visible,
// else this CPU.
#pragma once

#include <optional>
#include <string>

#include "codegen/emit/Emit.h"
#include "codegen/planner/Hardware.h"

namespace fsdpgen {

// Whether this machine shows an NVIDIA GPU to processes started here (the
// driver lists its GPUs under /proc; CUDA_VISIBLE_DEVICES may hide them).
bool gpu_visible();

// The built-in hardware's names, "a100-40g, a100-80g, ...", for help texts.
std::string hardware_name_list();

// What the target is for: a plan (check, plan, schedule), or a program
// emitted or built (building for cuda needs the CUDA runtime library;
// emitting does not).
enum class TargetFor { Plan, Emit, Build };

struct TargetRequest {
  TargetFor purpose = TargetFor::Plan;
  std::string target;  // emit, build: --target cpu|cuda; empty: cuda where a GPU is visible
  std::string gpu = "h100-sxm";  // --gpu: a built-in hardware's name
  bool gpu_given = false;
  std::string hardware;  // plan, schedule: --hardware NAME|PROFILE
  bool hardware_given = false;
};

struct Target {
  Hardware hardware;       // what the planner plans for
  EmitTarget emit;         // what emit writes for (and build compiles)
  std::string why;         // a plan's: how `hardware` was chosen, for its first line
  bool defaulted = false;  // a plan's: chosen without --gpu or --hardware
};

// The target `request` asks for; empty after printing why not on stderr (an
// unknown hardware, a bad profile, --gpu naming other hardware than
// --hardware, --target cuda on a CPU or without the CUDA runtime). Notes
// on stderr what the user may not expect: building for the CPU because no
// GPU is visible, a profile measured by another fsdpgen.
std::optional<Target> resolve_target(const TargetRequest& request);

}  // namespace fsdpgen
