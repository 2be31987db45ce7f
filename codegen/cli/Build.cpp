// Build: emit and build and their flags, the pipeline to its emit and build passes
// (codegen/driver/EmitPass.h, codegen/driver/BuildPass.h), and where their output goes;
// a build's custom layers are then checked (CheckLayer.h's check_spec_layers).
#include "codegen/cli/Build.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "codegen/cli/CheckLayer.h"
#include "codegen/driver/Output.h"
#include "codegen/emit/Build.h"
#include "codegen/emit/BuildConfig.h"
#include "codegen/emit/JobScript.h"
#include "runtime/human.h"

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

namespace {

// The job script of a built binary (codegen/emit/JobScript.h).
bool write_job_script(const Pipeline& p, const PipelineOptions& o, const BuildRequest& r) {
  const Spec& spec = *p.spec;
  JobScriptInput in;
  in.command = r.command;
  in.revision = kBuildRevision;
  in.name = spec.model.name;
  std::error_code ec;
  in.binary = std::filesystem::absolute(r.output, ec).lexically_normal().string();
  in.workdir = std::filesystem::current_path(ec).string();
  in.world = spec.parallel.world;
  in.ranks_per_node = spec.parallel.ranks_per_node;
  in.sharding = std::string(to_string(spec.parallel.sharding));
  in.cuda = o.emit.kind == EmitTarget::Kind::Cuda;
  in.gpu = o.emit.hardware;
  in.checkpoint_dir = spec.train.checkpoint.dir;
  if (!write_output(r.sbatch, job_script(in))) return false;
  std::filesystem::permissions(r.sbatch, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add, ec);
  out(fmt::format("fsdpgen: wrote {}, a Slurm batch script for {} x {}: sbatch {}\n", r.sbatch,
                  plural(in.world / in.ranks_per_node, "node"), plural(in.ranks_per_node, "rank"),
                  r.sbatch));
  return true;
}

bool writable(const std::string& path, const char* what) {
  const std::string reason = unwritable_output_reason(path);
  if (reason.empty()) return true;
  std::fputs(fmt::format("fsdpgen: error: cannot write {} '{}': {}\n", what, path, reason).c_str(),
             stderr);
  return false;
}

}  // namespace

int run_build(const Common& c, const BuildRequest& request) {
  const std::string& output = request.output;
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  if (!writable(output, "the binary")) return kExitSpecError;
  if (!request.sbatch.empty() && !writable(request.sbatch, "the job script")) return kExitSpecError;
  const std::optional<Target> target =
      resolve_target(c.target_request(TargetFor::Build, request.target));
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
  o.sources_dir = request.sources_dir;
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
  if (!request.sbatch.empty() && !write_job_script(p, o, request)) return kExitSpecError;
  return 0;
}

namespace {

struct EmitFlags {
  Common common;
  std::string target;
  std::string dir;
};

struct BuildFlags {
  Common common;
  BuildRequest request;
};

constexpr const char* kTargetHelp =
    "cuda or cpu (default: cuda when a GPU is visible here, else cpu); cuda plans for --gpu";
constexpr const char* kAllowUnrunHelp =
    "build features whose CUDA code is written and compared with its CPU twin in tests but has "
    "not run on a GPU yet (docs/gpu.md, \"Waiting for a GPU\"), with a warning each, instead of "
    "refusing them";

}  // namespace

Command add_emit_command(CLI::App& app) {
  auto f = std::make_shared<EmitFlags>();
  CLI::App* emit = app.add_subcommand("emit", "write the generated training program's C++ source");
  f->common.add_to(emit, Pass::Emit, true);
  emit->add_option("-o,--output", f->dir, "directory for train.cpp")->required();
  emit->add_option("--target", f->target, kTargetHelp)->check(CLI::IsMember({"cuda", "cpu"}));
  emit->add_flag("--allow-unrun", f->common.allow_unrun, kAllowUnrunHelp);
  return {emit, [f] { return run_emit(f->common, f->target, f->dir); }};
}

Command add_build_command(CLI::App& app, const std::string& command_line) {
  auto f = std::make_shared<BuildFlags>();
  f->request.command = command_line;
  BuildRequest& r = f->request;
  CLI::App* build = app.add_subcommand(
      "build", "generate and compile the training binary (also: fsdpgen spec.fsdp -o train)");
  f->common.add_to(build, Pass::Build, true);
  build->add_option("-o,--output", r.output, "the executable to write")->required();
  build->add_option("--sbatch", r.sbatch,
                    "also write a Slurm batch script for the binary: the plan's nodes and ranks "
                    "per node, srun --mpi=pmix, checkpoint and requeue before a time limit or on "
                    "a preemption (docs/multi-node.md)");
  build->add_option(
      "--sources", r.sources_dir,
      "keep the generated source in this directory (and the debug information in the binary)");
  build->add_option("--target", r.target, kTargetHelp)->check(CLI::IsMember({"cuda", "cpu"}));
  build->add_flag("--check", f->common.check,
                  "for finding memory bugs: a red zone before and after every buffer, checked "
                  "after every op (ops run one at a time), and AddressSanitizer (CPU target)");
  build->add_flag("--allow-unrun", f->common.allow_unrun, kAllowUnrunHelp);
  build->add_flag("--no-layer-check", f->common.no_layer_check,
                  "build without running check-layer's checks on the spec's custom layers (run "
                  "once per header and values, then cached)");
  return {build, [f] { return run_build(f->common, f->request); }};
}

}  // namespace fsdpgen
