// Build: emit and build, the pipeline to its emit and build passes
// (codegen/driver/EmitPass.h, codegen/driver/BuildPass.h), and where their output goes;
// a build's custom layers are then checked (CheckLayer.h's check_spec_layers).
#include "codegen/cli/Build.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "codegen/cli/CheckLayer.h"
#include "codegen/driver/Output.h"
#include "codegen/emit/Build.h"

namespace fsdpgen {

int run_emit(const Common& c, const std::string& target_flag, const std::string& dir) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  const std::optional<Target> target =
      resolve_target(c.target_request(TargetFor::Emit, target_flag));
  if (!target) return kExitSpecError;
  const Pipeline p = run_pipeline(c.spec_path, c.options(*target, dump));
  if (p.failure != Failure::None) return exit_status(p.failure);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fputs(fmt::format("fsdpgen: error: cannot create '{}': {}\n", dir, ec.message()).c_str(),
               stderr);
    return kExitSpecError;
  }
  return write_output((std::filesystem::path(dir) / "train.cpp").string(), p.source)
             ? 0
             : kExitSpecError;
}

int run_build(const Common& c, const std::string& target_flag, const std::string& output,
              const std::string& sources_dir) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  if (std::string reason = unwritable_output_reason(output); !reason.empty()) {
    std::fputs(
        fmt::format("fsdpgen: error: cannot write the binary '{}': {}\n", output, reason).c_str(),
        stderr);
    return kExitSpecError;
  }
  const std::optional<Target> target =
      resolve_target(c.target_request(TargetFor::Build, target_flag));
  if (!target) return kExitSpecError;
  if (c.check && target->emit.kind == EmitTarget::Kind::Cuda) {
    std::fputs(
        "fsdpgen: error: --check builds for the CPU target only (--target cpu): the CUDA "
        "backend's canaries are not written yet\n",
        stderr);
    return kExitUsage;
  }
  PipelineOptions o = c.options(*target, dump);
  o.output = output;
  o.sources_dir = sources_dir;
  const Pipeline p = run_pipeline(c.spec_path, o);
  if (p.failure != Failure::None) return exit_status(p.failure);
  // The layers are checked once the program compiles: a layer that does not
  // is reported by the compile, in the program it trains in.
  if (!c.no_layer_check && !check_spec_layers(*p.spec)) {
    std::error_code ec;
    std::filesystem::remove(output, ec);
    return kExitSpecError;
  }
  out(p.build_report);
  return 0;
}

}  // namespace fsdpgen
