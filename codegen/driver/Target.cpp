// Target: one resolution of --gpu, --hardware and --target for every command.
#include "codegen/driver/Target.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "codegen/driver/Output.h"
#include "codegen/emit/BuildConfig.h"
#include "codegen/planner/Calibrated.h"

namespace fsdpgen {
namespace {

// The hardware called `name`, or the profile at that path; empty after
// printing why not (the known names, or what is wrong with the profile).
std::optional<Hardware> hardware(const std::string& name) {
  try {
    return hardware_named(name);
  } catch (const std::exception& e) {
    print_stderr(fmt::format("fsdpgen: error: {}\n", e.what()));
    return std::nullopt;
  }
}

// A plan's target: --hardware, else --gpu, else what `fsdpgen spec.fsdp -o
// train` builds for here (see emit_target): the default GPU where one is
// visible, else this CPU.
std::optional<Target> plan_target(const TargetRequest& r) {
  Target t;
  std::string name;
  if (r.hardware_given) {
    name = r.hardware;
    t.why = "--hardware " + r.hardware;
  } else if (r.gpu_given) {
    name = r.gpu;
    t.why = "--gpu " + r.gpu;
  } else if (gpu_visible()) {
    name = r.gpu;
    t.why = fmt::format(
        "a GPU is visible here: planning for {}, which a build here targets; --gpu KIND plans "
        "for another",
        r.gpu);
    t.defaulted = true;
  } else {
    name = "cpu";
    t.why =
        "no GPU here: planning for this CPU, which a build here targets; --gpu h100-sxm plans for "
        "a GPU";
    t.defaulted = true;
  }
  std::optional<Hardware> hw = hardware(name);
  if (!hw) return std::nullopt;
  if (r.hardware_given && r.gpu_given && hw->name != r.gpu) {
    print_stderr(fmt::format(
        "fsdpgen: error: --hardware {} describes '{}'{}, not --gpu {}; give one of "
        "them\n",
        r.hardware, hw->name, hw->profile ? fmt::format(" ({})", hw->description) : "", r.gpu));
    return std::nullopt;
  }
  const std::string revision = fmt::format("fsdpgen {}", kBuildRevision);
  if (hw->profile && hw->profile->written_by != revision)
    print_stderr(
        fmt::format("fsdpgen: note: {} was measured by {}; this is {}: if the runtime's kernels "
                    "changed since, run `fsdpgen calibrate` again\n",
                    hw->profile_path, hw->profile->written_by, revision));
  t.hardware = *hw;
  if (hw->gpu) t.emit = {EmitTarget::Kind::Cuda, hw->name};
  return t;
}

// The target of emit and build: --target, else cuda where a GPU is visible;
// cuda plans for --gpu, cpu for this CPU.
std::optional<Target> emit_target(const TargetRequest& r) {
  std::string kind = r.target;
  if (kind.empty()) {
    kind = gpu_visible() ? "cuda" : "cpu";
    if (kind == "cpu")
      print_stderr(
          "fsdpgen: note: no GPU is visible here, so this builds for the CPU; add --target cuda "
          "to build for GPUs (it needs none to compile)\n");
  }
  Target t;
  if (kind == "cuda") {
    if (r.purpose == TargetFor::Build && !kBuildCudaAvailable) {
      print_stderr(
          "fsdpgen: error: --target cuda: this fsdpgen was built without the CUDA runtime (no "
          "nvcc was found when it was configured); install the CUDA toolkit and rebuild "
          "fsdpgen\n");
      return std::nullopt;
    }
    std::optional<Hardware> hw = hardware(r.gpu);
    if (!hw) return std::nullopt;
    if (!hw->gpu) {
      print_stderr(
          fmt::format("fsdpgen: error: --target cuda plans for a GPU, but --gpu {} is not one; "
                      "pick one of: {}\n",
                      r.gpu, hardware_name_list()));
      return std::nullopt;
    }
    t.emit = {EmitTarget::Kind::Cuda, hw->name};
  }
  // The plan uses the built-in hardware the program is named for: a --gpu
  // profile's GPU plans with its built-in figures (a profile of a GPU that
  // has no built-in twin, with its own).
  std::optional<Hardware> planned = find_hardware(t.emit.hardware);
  if (!planned) planned = hardware(r.gpu);
  if (!planned) return std::nullopt;
  t.hardware = *planned;
  return t;
}

}  // namespace

bool gpu_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"))
    if (*v == '\0' || std::string_view(v).rfind("-1", 0) == 0) return false;
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

std::string hardware_name_list() {
  std::string s;
  for (std::string_view n : hardware_names())
    s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::optional<Target> resolve_target(const TargetRequest& r) {
  return r.purpose == TargetFor::Plan ? plan_target(r) : emit_target(r);
}

}  // namespace fsdpgen
