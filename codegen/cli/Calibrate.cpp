// Calibrate: the flags; plan, write the request, run the calibration binary,
// check what it wrote.
#include "codegen/cli/Calibrate.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "codegen/cli/Common.h"
#include "codegen/driver/Pipeline.h"
#include "codegen/driver/Target.h"
#include "codegen/emit/BuildConfig.h"
#include "codegen/planner/Calibrated.h"
#include "codegen/planner/Planner.h"
#include "dsl/Frontend.h"
#include "runtime/files/file_io.h"
#include "runtime/profile/profile.h"

extern char** environ;

namespace fsdpgen {
namespace {

namespace fs = std::filesystem;

// The standard sweep: shapes that bracket the shipped specs, so that plans
// of other models interpolate. CPUs: byte-level models like
// specs/small-10m.fsdp with fp32 and bf16 params; GPUs: GPT-2's widths at T =
// 1024 with bf16 params (gradients reduced in fp32, as the shipped specs do).
std::vector<std::string> standard_sweep(bool gpu, int64_t ranks) {
  struct Shape {
    int64_t width, heads;
  };
  const std::vector<Shape> shapes = gpu ? std::vector<Shape>{{768, 12}, {1024, 16}, {1600, 25}}
                                        : std::vector<Shape>{{128, 4}, {256, 8}, {512, 8}};
  const std::vector<std::string_view> dtypes =
      gpu ? std::vector<std::string_view>{"bf16"} : std::vector<std::string_view>{"fp32", "bf16"};
  std::vector<std::string> texts;
  for (std::string_view dtype : dtypes)
    for (const Shape& s : shapes)
      texts.push_back(fmt::format(
          "model sweep{} {{ family = gpt2 vocab = {} context = {} width = {} heads = {} layers = "
          "2 }}\nunits {{ each block }}\nparallel {{ world = {} sharding = full_shard precision "
          "{{ param = {} reduce = fp32 master = fp32 }} }}\ntrain {{ optimizer = adamw(lr = "
          "1e-3) micro_batch = {} steps = 100 data = synthetic(seed = 1) }}\n",
          s.width, gpu ? 50257 : 256, gpu ? 1024 : 256, s.width, s.heads, ranks, dtype,
          gpu ? 8 : 4));
  return texts;
}

// The schedule of each spec for `base`, with its world capped at `ranks`
// when it asks for more (the layer passes do not change; the collectives of
// larger groups cannot be measured here); empty after printing why.
std::optional<std::vector<Schedule>> plan_specs(const CalibrateOptions& o, const Hardware& base,
                                                int64_t& ranks) {
  std::vector<Schedule> out;
  if (o.specs.empty()) {
    for (const std::string& text : standard_sweep(base.gpu, std::max<int64_t>(ranks, 1))) {
      FrontendResult r = load_spec_text("standard sweep", text);
      if (!r.spec) {
        error("the standard sweep's spec is invalid (a bug):\n" + r.diagnostics);
        return std::nullopt;
      }
      PlanOptions po;
      po.stop_after = PlanStep::Schedule;
      Plan plan = make_plan(*r.spec, base, po);
      if (plan.failure != Failure::None) {
        error("the standard sweep's spec does not plan (a bug): " + plan.error);
        return std::nullopt;
      }
      out.push_back(std::move(*plan.schedule));
    }
    return out;
  }
  for (const std::string& path : o.specs) {
    PipelineOptions po;
    po.target = &base;
    po.stop_after = Pass::Schedule;
    po.overrides.world = o.world;
    po.overrides.micro_batch = o.micro_batch;
    Pipeline p = run_pipeline(path, po);
    if (p.failure != Failure::None) return std::nullopt;
    if (!p.unsupported.empty()) {
      error(fmt::format("{}: the {} runtime cannot run this spec, so it cannot be measured: {}",
                        path, base.gpu ? "CUDA" : "CPU", p.unsupported.front()));
      return std::nullopt;
    }
    if (p.spec->model.family != Family::Gpt2) {
      error(fmt::format(
          "{}: the calibration binary measures gpt2's layer passes; it cannot run this spec's "
          "{} layers yet (plan and schedule predict them from the built-in hardware)",
          path, to_string(p.spec->model.family)));
      return std::nullopt;
    }
    const ParallelSpec& par = p.spec->parallel;
    if (o.ranks == 0)
      ranks = std::max(ranks, std::min(par.world, std::max<int64_t>(1, par.ranks_per_node)));
    out.push_back(std::move(*p.schedule));
  }
  return out;
}

int64_t gpus_visible() {
  std::error_code ec;
  int64_t n = 0;
  for (fs::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end;
       it.increment(ec))
    ++n;
  return n;
}

// fsdpgen-calibrate, built with this fsdpgen (as the runtime library its
// builds link is: codegen/emit/BuildConfig.h).
fs::path calibration_binary() {
  return kBuildCalibrateBinary;
}

std::string shell_quoted(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) {
    const bool plain = a.find_first_not_of(
                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./=:,"
                           "+") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain && !a.empty() ? a : "'" + a + "'");
  }
  return out;
}

// Runs args (args[0] on PATH) with this process's stdout and stderr; its exit status.
int run_command(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (int err = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ); err != 0) {
    error(fmt::format("cannot run {}: {}", args[0], std::strerror(err)));
    return 127;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int run_calibrate(const CalibrateOptions& o, bool gpu_visible) {
  const std::string target = !o.target.empty() ? o.target : gpu_visible ? "cuda" : "cpu";
  const std::optional<Hardware> base = find_hardware(target == "cuda" ? o.gpu : "cpu");
  if (!base || base->gpu != (target == "cuda")) {
    error(base ? fmt::format("--gpu {} is not a GPU", o.gpu) : unknown_hardware_error(o.gpu));
    return 2;
  }
  if (o.output.empty() == o.request.empty()) {
    error("give -o PROFILE (measure here) or --request FILE (write what to measure and stop)");
    return 2;
  }
  if (o.nodes > 1 && o.request.empty()) {
    error(
        fmt::format("--nodes {} measures across nodes: give --request FILE and run the printed "
                    "srun line on them",
                    o.nodes));
    return 2;
  }
  // Ranks on this node: --ranks, else as many as the specs put on a node (the
  // standard sweep: all), up to its cores or GPUs and 8.
  const int64_t slots = std::min<int64_t>(
      8, target == "cuda" ? std::max<int64_t>(1, gpus_visible())
                          : std::max<int64_t>(1, std::thread::hardware_concurrency()));
  int64_t ranks = o.ranks > 0 ? o.ranks : o.specs.empty() ? slots : 0;
  const std::string request_path = o.request.empty() ? o.output + ".request.json" : o.request;
  for (const std::string& written : {request_path, o.output})
    if (const std::string overlap = file_output_overlap(written, o.specs); !overlap.empty()) {
      error(overlap + ": calibrate would overwrite a spec it reads; name another file");
      return 2;
    }
  auto schedules = plan_specs(o, *base, ranks);
  if (!schedules) return 1;
  if (o.ranks == 0) ranks = std::clamp<int64_t>(ranks, 1, slots);
  std::string sweep;
  for (const std::string& s : o.specs)
    sweep += (sweep.empty() ? "" : " ") + s;
  profile::Profile request =
      calibration_request(*schedules, *base, ranks, sweep.empty() ? "standard" : sweep, o.nodes);

  const fs::path binary = calibration_binary();
  try {
    profile::save(request, request_path);
  } catch (const profile::ProfileError& e) {
    error(e.what());
    return 1;
  }
  std::vector<std::string> measure = {binary.string(), request_path, "-o",
                                      o.output.empty() ? "PROFILE.json" : o.output};
  if (o.quick)
    measure.insert(measure.end(), {"--rounds", "2", "--min-runs", "2", "--min-seconds", "0"});
  if (!o.request.empty()) {
    // Muon's Newton-Schulz shapes are named only where the optimizer has them.
    const size_t muon_shapes = request.compute.front().muon_ns.size();
    const std::string muon =
        muon_shapes == 0 ? "" : fmt::format(", {} Newton-Schulz shapes", muon_shapes);
    const std::string srun = o.nodes > 1
                                 ? fmt::format("srun -N {} --ntasks-per-node {}", o.nodes, ranks)
                                 : fmt::format("srun -n {}", ranks);
    const std::string mpirun =
        o.nodes > 1 ? fmt::format("mpirun -n {} --map-by ppr:{}:node --hostfile HOSTS",
                                  o.nodes * ranks, ranks)
                    : fmt::format("mpirun -n {}", ranks);
    std::fputs(
        fmt::format("fsdpgen: wrote the request {} ({} layer passes, {} collectives, {} "
                    "copies{}, {} rank{} per node{}); measure it on the {} with:\n  "
                    "{} --mpi=pmix {}\n  (or: {} --bind-to none {})\n",
                    request_path, request.compute.front().layers.size(), request.collectives.size(),
                    request.copies.size(), muon, ranks, ranks == 1 ? "" : "s",
                    o.nodes > 1 ? fmt::format(" on {} nodes", o.nodes) : "",
                    o.nodes > 1 ? "nodes" : "machine", srun, shell_quoted(measure), mpirun,
                    shell_quoted(measure))
            .c_str(),
        stdout);
    return 0;
  }
  std::error_code ec;
  if (!fs::exists(binary, ec)) {
    error(
        fmt::format("the calibration binary {} is missing; build it with fsdpgen (cmake "
                    "--build build --target fsdpgen-calibrate)",
                    binary.string()));
    return 1;
  }
  std::vector<std::string> command = measure;
  if (ranks > 1) {
    command.insert(command.begin(), {"mpirun", "-n", std::to_string(ranks), "--bind-to", "none"});
    if (geteuid() == 0) {  // Open MPI refuses root unless told
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
  }
  std::fputs(fmt::format("fsdpgen: measuring {} on {} rank{}: {}\n",
                         sweep.empty() ? "the standard sweep" : sweep, ranks, ranks == 1 ? "" : "s",
                         shell_quoted(command))
                 .c_str(),
             stdout);
  std::fflush(stdout);
  const auto started = std::chrono::steady_clock::now();
  const int status = run_command(command);
  fs::remove(request_path, ec);
  if (status != 0) {
    error(fmt::format("the calibration failed (exit status {}); no profile was written", status));
    return 1;
  }
  try {
    const profile::Profile p = profile::load(o.output);
    const Hardware hw = calibrated_hardware(p, o.output);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::fputs(fmt::format("fsdpgen: wrote {} in {:.0f} s: {}; plan with `fsdpgen plan SPEC "
                           "--hardware {}`\n",
                           o.output, seconds, hw.description, o.output)
                   .c_str(),
               stdout);
  } catch (const profile::ProfileError& e) {
    error(fmt::format("the calibration binary wrote a bad profile: {}", e.what()));
    return 1;
  }
  return 0;
}

Command add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "measure this machine (its layer passes, optimizer, collectives and copies as the runtime "
      "runs them) into a hardware profile for plan and schedule --hardware");
  calibrate->add_option("specs", o->specs,
                        "specs whose steps to measure (default: a standard sweep of shapes)");
  calibrate->add_option("-o,--output", o->output, "the profile (JSON) to write");
  calibrate
      ->add_option("--target", o->target,
                   "cpu or cuda (default: cuda when a GPU is visible here, else cpu)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  calibrate->add_option("--gpu", o->gpu,
                        "cuda: the built-in hardware whose figures the profile refines "
                        "(default: h100-sxm)");
  calibrate
      ->add_option("--ranks", o->ranks,
                   "ranks on this node (default: as many as the specs put on a node, up to "
                   "its cores or GPUs)")
      ->check(CLI::Range(1, 1024));
  calibrate->add_flag("--quick", o->quick, "fewer runs per measurement (seconds)");
  calibrate->add_option("--world", o->world,
                        "number of ranks (replaces each spec's parallel.world)");
  calibrate->add_option(
      "--micro-batch", o->micro_batch,
      "sequences per rank per micro-batch (replaces each spec's train.micro_batch)");
  calibrate->add_option("--request", o->request,
                        "write what to measure to this file and stop (run the printed command "
                        "under srun on the cluster)");
  calibrate
      ->add_option("--nodes", o->nodes,
                   "with --request: the nodes the printed command runs on (--ranks on each); "
                   "collectives whose groups span nodes are then measured across them")
      ->check(CLI::Range(1, 1024));
  return {calibrate, [o] { return run_calibrate(*o, gpu_visible()); }};
}

}  // namespace fsdpgen
