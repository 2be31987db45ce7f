// The fsdpgen command line: subcommands over the compiler's passes.
//   fsdpgen check spec.fsdp [--dump | --hf DIR]
//   fsdpgen schedule spec.fsdp [--world N] [--micro-batch B] [--format text|json|trace] [-o FILE]
//   fsdpgen plan spec.fsdp [--world N] [--micro-batch B] [--gpu KIND] [--hardware PROFILE]
//   fsdpgen emit spec.fsdp -o DIR [--target cuda|cpu] [--world N] [--micro-batch B] [--gpu KIND]
//   fsdpgen spec.fsdp -o train [--target cuda|cpu] [--sources DIR] ...   (= fsdpgen build)
//   fsdpgen merge CHECKPOINT -o model.safetensors [--dtype fp32|bf16|fp16] [--max-shard-size 5GB]
//   fsdpgen calibrate [SPEC...] -o profile.json [--target cpu|cuda] [--ranks N] [--world N]
//                     [--micro-batch B] [--quick]
//   fsdpgen compare PREDICTED.json MEASURED.json [--rank R] [--top N] [-o merged.json]
//   fsdpgen compare MEASURED.json --ranks A,B [--top N]
//   fsdpgen check-layer HEADER LAYER --hyper NAME=VALUE... [--dtype bf16|fp16] [--tokens N]
//   fsdpgen import-hf DIR|config.json [-o spec.fsdp]
//   fsdpgen tune spec.fsdp [--world N | --worlds 8,16,32] [--gpu KIND | --hardware PROFILE]
//                [-o tuned.fsdp] [--top K] [--keep KNOB...] [--allow-batch-change]
//                [--min-gain PCT] [--write-candidates DIR]
// Each subcommand but merge and import-hf runs the pipeline (planner/Pipeline.h) up to its
// last pass; --dump-after PASS prints a pass's IR and --time-passes times them.
#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/Calibrate.h"
#include "cli/CheckLayer.h"
#include "cli/HfSpec.h"
#include "cli/Tune.h"
#include "dsl/Layers.h"
#include "dsl/Print.h"
#include "dsl/Values.h"
#include "emit/Build.h"
#include "emit/BuildConfig.h"
#include "emit/Emit.h"
#include "emit/Template.h"
#include "planner/Calibrated.h"
#include "planner/Compare.h"
#include "planner/Fit.h"
#include "planner/Pipeline.h"
#include "profile/profile.h"
#include "runtime/files/checkpoint_merge.h"
#include "runtime/files/file_io.h"
#include "runtime/files/hf_config.h"
#include "suggest/Suggest.h"

namespace fsdpgen {
namespace {

// Exit statuses: 0 success, 1 the spec has errors or output failed, 2 bad
// command line, 3 internal error (a plan that breaks an invariant: a bug).
constexpr int kExitSpecError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitInternal = 3;
constexpr int kExitDoesNotFit = 4;  // plan: the plan, printed whole, exceeds the device
// build --check: each red zone, one buffer alignment (planner/Memory.h).
constexpr int64_t kRedZoneBytes = 256;

void out(const std::string& s) {
  std::fputs(s.c_str(), stdout);
}

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
  std::string gpu = "h100-sxm";
  CLI::Option* gpu_flag = nullptr;  // its count() says whether --gpu was given
  std::string hardware_arg;         // plan and schedule: --hardware NAME|PROFILE
  CLI::Option* hardware_flag = nullptr;
  bool time_passes = false;
  bool no_reuse = false;
  bool check = false;  // build and emit --check: red zones around every buffer
  std::string dump_after;
  std::string command;          // the subcommand's name
  Pass last_pass = Pass::Cost;  // where it stops

  void add_to(CLI::App* app, Pass last, bool overrides) {
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
    gpu_flag = app->add_option("--gpu", gpu,
                               "hardware the cost model and memory limits use: " + known_list() +
                                   " (default: h100-sxm; plan and schedule without --gpu: what "
                                   "a build here targets, cpu where no GPU is visible)");
    app->add_flag("--no-reuse", no_reuse,
                  "for debugging: give every buffer its own memory, none reused after a free");
  }

  // The passes up to `last`, in order.
  static std::vector<std::string_view> passes(Pass last) {
    return {kPassNames.begin(), kPassNames.begin() + static_cast<int>(last) + 1};
  }
  static std::string pass_list(Pass last) {
    std::string s;
    for (std::string_view n : passes(last))
      s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
  }

  // The pass --dump-after names in `pass` (none without it); false after
  // printing why when it names no pass this subcommand runs.
  bool dump_pass(std::optional<Pass>& pass) const {
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

  static std::string known_list() {
    std::string s;
    for (std::string_view n : hardware_names())
      s += (s.empty() ? "" : ", ") + std::string(n);
    return s;
  }

  // The hardware called `name`, or the profile at that path; empty after
  // printing why not (the known names, or what is wrong with the profile).
  static std::optional<Hardware> hardware(const std::string& name) {
    try {
      return hardware_named(name);
    } catch (const std::exception& e) {
      std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
      return std::nullopt;
    }
  }
  std::optional<Hardware> hardware() const { return hardware(gpu); }

  // Adds --hardware (plan and schedule).
  void add_hardware_to(CLI::App* app) {
    hardware_flag = app->add_option(
        "--hardware", hardware_arg,
        "plan with a hardware profile that `fsdpgen calibrate` measured (a .json file), or a "
        "built-in hardware by name (as --gpu)");
  }

  // Runs the passes up to this subcommand's last, for `hw`.
  Pipeline run(const Hardware& hw, std::optional<Pass> dump, LaterPass emit = {},
               LaterPass build = {}) const {
    PipelineOptions o;
    o.target = &hw;
    o.stop_after = last_pass;
    o.dump_after = dump;
    o.overrides.world = world;
    o.overrides.micro_batch = micro_batch;
    o.time_passes = time_passes;
    o.memory.reuse = !no_reuse;
    o.memory.red_zone_bytes = check ? kRedZoneBytes : 0;
    o.emit = std::move(emit);
    o.build = std::move(build);
    return run_pipeline(spec_path, o);
  }
};

int exit_status(Failure f) {
  return f == Failure::None ? 0 : f == Failure::User ? kExitSpecError : kExitInternal;
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1LL << 30));
}

// Whether this machine shows an NVIDIA GPU to processes started here (the
// driver lists its GPUs under /proc; CUDA_VISIBLE_DEVICES may hide them).
bool gpu_visible() {
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"))
    if (*v == '\0' || std::string_view(v).rfind("-1", 0) == 0) return false;
  std::error_code ec;
  std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec);
  return !ec && it != std::filesystem::directory_iterator();
}

// The hardware plan and schedule are for, and why: --gpu, else what
// `fsdpgen spec.fsdp -o train` builds for here (see resolve_target): the
// default GPU where one is visible, else this CPU.
struct PlanTarget {
  std::string hardware;
  std::string why;
  bool defaulted = false;
};

PlanTarget plan_target(const Common& c) {
  if (c.hardware_flag && c.hardware_flag->count() > 0)
    return {c.hardware_arg, "--hardware " + c.hardware_arg, false};
  if (c.gpu_flag && c.gpu_flag->count() > 0) return {c.gpu, "--gpu " + c.gpu, false};
  if (gpu_visible())
    return {c.gpu,
            fmt::format("a GPU is visible here: planning for {}, which a build here targets; "
                        "--gpu KIND plans for another",
                        c.gpu),
            true};
  return {"cpu",
          "no GPU here: planning for this CPU, which a build here targets; --gpu h100-sxm "
          "plans for a GPU",
          true};
}

// The hardware plan and schedule use; empty after printing why not: an
// unknown name, a bad profile, or --gpu naming other hardware than --hardware.
std::optional<Hardware> plan_hardware(const Common& c, const PlanTarget& target) {
  std::optional<Hardware> hw = Common::hardware(target.hardware);
  if (hw && c.hardware_flag && c.hardware_flag->count() > 0 && c.gpu_flag &&
      c.gpu_flag->count() > 0 && hw->name != c.gpu) {
    std::fputs(fmt::format("fsdpgen: error: --hardware {} describes '{}'{}, not --gpu {}; give "
                           "one of them\n",
                           c.hardware_arg, hw->name,
                           hw->profile ? fmt::format(" ({})", hw->description) : "", c.gpu)
                   .c_str(),
               stderr);
    return std::nullopt;
  }
  const std::string revision = fmt::format("fsdpgen {}", kBuildRevision);
  if (hw && hw->profile && hw->profile->written_by != revision)
    std::fputs(fmt::format("fsdpgen: note: {} was measured by {}; this is {}: if the runtime's "
                           "kernels changed since, run `fsdpgen calibrate` again\n",
                           hw->profile_path, hw->profile->written_by, revision)
                   .c_str(),
               stderr);
  return hw;
}

// "custom layer: mlp = SwiGluMlp(d_model = 128, d_ff = 344) from swiglu_mlp.h
// in every block: ..." for the plan's summary.
std::string custom_layer_line(const CustomLayerSpec& c) {
  std::vector<std::string> hyper;
  for (const CustomLayerSpec::Hyper& h : c.hyper)
    hyper.push_back(fmt::format("{} = {}", h.name, h.value));
  int64_t params = 0, saved = 0, scratch = 0;
  for (const CustomTensorSpec& t : c.params) {
    int64_t n = 1;
    for (int64_t d : t.shape)
      n *= d;
    params += n;
  }
  for (const CustomArraySpec& a : c.saved)
    saved += a.per_token;
  for (const CustomArraySpec& a : c.scratch)
    scratch += a.per_token;
  return fmt::format(
      "custom layer: {} = {}({}) from {} in every block: {} parameters; {} saved and {} scratch "
      "elements and {} forward FLOPs per token\n",
      c.module, c.layer, fmt::join(hyper, ", "), c.header, grouped(params), grouped(saved),
      grouped(scratch), grouped(c.flops_per_token));
}

// check's target is what a build here targets (as plan's without --gpu):
// target support warns of what that backend cannot build yet. With --hf
// DIR it compares the model with DIR's config.json instead of summing it up.
int run_check(const Common& c, bool print_resolved, const std::string& hf) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  const Hardware hw = *find_hardware(plan_target(c).hardware);
  const Pipeline p = c.run(hw, dump);
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
  const PlanTarget target = plan_target(c);
  auto hw = plan_hardware(c, target);
  if (!hw) return kExitUsage;
  // On stderr: stdout stays what the binary's --print-schedule prints.
  if (target.defaulted)
    std::fputs(fmt::format("fsdpgen: note: schedule for {} ({})\n", hw->name, target.why).c_str(),
               stderr);
  const Pipeline p = c.run(*hw, dump);
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
  const PlanTarget target = plan_target(c);
  auto hw = plan_hardware(c, target);
  if (!hw) return kExitUsage;
  auto started = std::chrono::steady_clock::now();
  const Pipeline p = c.run(*hw, dump);
  if (p.failure != Failure::None) return exit_status(p.failure);
  const Spec& s = *p.spec;
  const ParallelSpec& par = s.parallel;
  const Timeline& t = *p.timeline;
  out(fmt::format("plan of {} on {} x {}: {} ({})\n", s.model.name, par.world, hw->name,
                  hw->description, target.why));
  out(print_hardware(*hw).substr(print_hardware(*hw).find('\n') + 1));  // its figures and sources
  out(fmt::format(
      "model: {} parameters ({} padded elements{}) in {} units; {} with shard group {} x {} "
      "replica{}; "
      "{} micro-batch{} of {} x {} tokens per rank\n",
      p.units->total_params, p.units->total_padded_elems, vocab_padding_note(*p.units),
      p.units->units.size(), to_string(par.sharding), par.shard_group, par.replicas(),
      par.replicas() == 1 ? "" : "s", par.accumulate.micro_batches,
      par.accumulate.micro_batches == 1 ? "" : "es", p.schedule->micro_batch, s.model.context));
  for (const CustomLayerSpec& c : s.model.custom)
    out(custom_layer_line(c));
  out(print_memory_plan(*p.schedule, *p.memory));
  const int64_t peak = p.memory->device_arena_bytes, usable = usable_bytes(*hw);
  const int64_t host = p.memory->host_arena_bytes;
  const bool fits = plan_fits(*p.memory, *hw);
  if (hw->gpu || host == 0)
    out(fmt::format(
        "fits: {}: peak {} of {} usable ({} {} minus {} reserved for the runtime), {:.1f}%\n",
        fits ? "yes" : "NO", gib(peak), gib(usable), hw->name, gib(hw->memory_bytes),
        gib(reserved_bytes(*hw)), 100.0 * static_cast<double>(peak) / static_cast<double>(usable)));
  else
    out(fmt::format(
        "fits: {}: peak {} and host arena {} together of {} usable (one RAM), {:.1f}%\n",
        fits ? "yes" : "NO", gib(peak), gib(host), gib(usable),
        100.0 * static_cast<double>(peak + host) / static_cast<double>(usable)));
  if (hw->gpu && host > 0)
    out(
        fmt::format("      host arena {} of {} usable ({} of the node's RAM per GPU, a tenth kept "
                    "for the process), {:.1f}%{}\n",
                    gib(host), gib(usable_host_bytes(*hw)), gib(hw->host_memory_bytes),
                    100.0 * static_cast<double>(host) / static_cast<double>(usable_host_bytes(*hw)),
                    host > usable_host_bytes(*hw) ? ": does NOT fit" : ""));
  out(print_timeline(*p.schedule, t));
  if (!fits) {
    auto alts = fitting_alternatives(s, *hw);
    if (alts.empty()) {
      out(fmt::format(
          "nothing fits on {} x {}, with the global batch kept or changed (tune's search: "
          "sharding, units, recompute, offload, micro-batch and accumulation); "
          "`fsdpgen tune` names the smallest world that fits\n",
          par.world, hw->name));
    } else {
      out(
          fmt::format("changes that fit on {} x {} (tune's search), the global batch kept unless "
                      "a row says so, fastest per token per GPU first:\n",
                      par.world, hw->name));
      for (const Alternative& a : alts)
        out(fmt::format(
            "  step {:9.1f} ms {:9.0f} tok/s/GPU  peak {:>10}  {}{}\n", a.step_ms,
            a.tokens_per_s_per_gpu, gib(a.peak_bytes), a.change,
            a.batch_changed ? fmt::format(" [global batch {} sequences]", a.global_batch) : ""));
    }
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  out(fmt::format("planned in {:.0f} ms\n", ms));
  return fits ? 0 : kExitDoesNotFit;
}

// The target of emit and build: --target, else cuda where a GPU is visible.
// Building for cuda needs the CUDA runtime library; emitting does not.
std::optional<EmitTarget> resolve_target(const Common& c, const std::string& target,
                                         bool building) {
  EmitTarget t;
  std::string kind = target;
  if (kind.empty()) {
    kind = gpu_visible() ? "cuda" : "cpu";
    if (kind == "cpu")
      std::fputs(
          "fsdpgen: note: no GPU is visible here, so this builds for the CPU; add "
          "--target cuda to build for GPUs (it needs none to compile)\n",
          stderr);
  }
  if (kind == "cpu") return t;
  if (building && !kBuildCudaAvailable) {
    std::fputs(
        "fsdpgen: error: --target cuda: this fsdpgen was built without the CUDA runtime "
        "(no nvcc was found when it was configured); install the CUDA toolkit and "
        "rebuild fsdpgen\n",
        stderr);
    return std::nullopt;
  }
  std::optional<Hardware> hw = c.hardware();
  if (!hw) return std::nullopt;
  if (!hw->gpu) {
    std::fputs(fmt::format("fsdpgen: error: --target cuda plans for a GPU, but --gpu {} is not "
                           "one; pick one of: {}\n",
                           c.gpu, Common::known_list())
                   .c_str(),
               stderr);
    return std::nullopt;
  }
  t.kind = EmitTarget::Kind::Cuda;
  t.hardware = hw->name;
  return t;
}

// A file, or a glob pattern matching at least one file.
bool data_path_exists(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  const bool found = rc == 0 && g.gl_pathc > 0;
  globfree(&g);
  std::error_code ec;
  return found && (pattern.find_first_of("*?[") != std::string::npos ||
                   std::filesystem::is_regular_file(pattern, ec));
}

// Before emitting: notes on what the program will meet when it runs.
void note_before_emit(const Common& c, const EmitTarget& target, const Hardware& hw,
                      const Pipeline& p) {
  if (target.kind == EmitTarget::Kind::Cuda && p.memory->device_arena_bytes > usable_bytes(hw))
    std::fputs(fmt::format("fsdpgen: warning: the plan needs {} per GPU but a {} has {} usable; "
                           "`fsdpgen plan {} --gpu {}` shows changes that fit\n",
                           gib(p.memory->device_arena_bytes), hw.name, gib(usable_bytes(hw)),
                           c.spec_path, target.hardware)
                   .c_str(),
               stderr);
  auto note_missing = [](const DataSpec& d, const char* key, const char* flag) {
    for (const std::string& file : d.paths)
      if (!data_path_exists(file))
        std::fputs(
            fmt::format("fsdpgen: note: the spec's {} file {} {} (a relative path is found "
                        "from the spec's directory); the binary reads it when it starts "
                        "(or {})\n",
                        key, file,
                        file.find_first_of("*?[") == std::string::npos ? "does not exist yet"
                                                                       : "matches no file yet",
                        flag)
                .c_str(),
            stderr);
  };
  note_missing(p.spec->train.data, "data", "--data FILES");
  if (p.spec->train.val) note_missing(*p.spec->train.val, "val", "--val FILES");
}

// The pipeline's emit pass: the generated program's source for `target`.
Failure emit_pass(const Common& c, const EmitTarget& target, const Hardware& hw, Pipeline& p) {
  note_before_emit(c, target, hw, p);
  try {
    p.source = emit_program(c.spec_path, *p.schedule, *p.memory, target);
    return Failure::None;
  } catch (const std::logic_error& e) {  // the emitter's own consistency checks
    std::fputs(fmt::format("fsdpgen: internal error: {}\n", e.what()).c_str(), stderr);
  } catch (const TemplateError& e) {
    std::fputs(fmt::format("fsdpgen: internal error: {}\n", e.what()).c_str(), stderr);
  }
  return Failure::Internal;
}

// The directory the source is compiled from: --sources, else a fresh
// temporary one; empty after printing why.
std::optional<std::filesystem::path> sources_dir_for(const std::string& sources_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!sources_dir.empty()) {
    fs::create_directories(sources_dir, ec);
    return fs::path(sources_dir);
  }
  // The error_code form: a TMPDIR that names no directory is the user's to fix, not a crash.
  std::string pattern = (fs::temp_directory_path(ec) / "fsdpgen-XXXXXX").string();
  if (ec || !mkdtemp(pattern.data())) {
    std::fputs(fmt::format("fsdpgen: error: cannot create a temporary directory: {} (TMPDIR, "
                           "else /tmp, must be a writable directory; or keep the source with "
                           "--sources DIR)\n",
                           ec ? ec.message() : std::strerror(errno))
                   .c_str(),
               stderr);
    return std::nullopt;
  }
  return fs::path(pattern);
}

// The pipeline's build pass: compiles the emitted source into `output`.
Failure build_pass(const Common& c, const EmitTarget& target, const std::string& output,
                   const std::string& sources_dir, Pipeline& p) {
  auto dir = sources_dir_for(sources_dir);
  if (!dir) return Failure::User;
  const std::string src = (*dir / "train.cpp").string();
  if (!write_output(src, p.source)) return Failure::User;
  const bool cuda = target.kind == EmitTarget::Kind::Cuda;
  const std::vector<std::string>& headers = p.spec->model.layer_headers;
  std::vector<std::string> includes;
  for (const std::string& h : headers)
    includes.push_back(std::filesystem::absolute(h).parent_path().lexically_normal().string());
  std::vector<std::string> flags;
  if (c.check) flags = {"-fsanitize=address", "-fno-omit-frame-pointer", "-g"};
  BuildResult r =
      build_program(src, output, cuda, includes, p.spec->model.layer_cuda_sources, flags);
  if (sources_dir.empty()) std::filesystem::remove_all(*dir);
  if (!r.ok && !headers.empty()) {  // the layers' code is the user's: so are its errors
    std::fputs(fmt::format("fsdpgen: error: compiling the generated program with the custom "
                           "layers of {} failed (the compiler's errors above):\n  {}\n"
                           "(run with --sources DIR to keep the source)\n",
                           fmt::join(headers, " and "), r.command)
                   .c_str(),
               stderr);
    return Failure::User;
  }
  if (!r.ok) {
    std::fputs(
        fmt::format("fsdpgen: internal error: compiling the generated program failed:\n  {}\n"
                    "(run with --sources DIR to keep the source)\n",
                    r.command)
            .c_str(),
        stderr);
    return Failure::Internal;
  }
  p.build_report =
      fmt::format("fsdpgen: built {} from {} for {} in {:.1f} s\n", output, c.spec_path,
                  cuda ? "CUDA (" + target.hardware + ")" : "CPU", r.seconds);
  return Failure::None;
}

int run_emit(const Common& c, const std::string& target_flag, const std::string& dir) {
  std::optional<Pass> dump;
  if (!c.dump_pass(dump)) return kExitUsage;
  auto target = resolve_target(c, target_flag, false);
  if (!target) return kExitSpecError;
  const Hardware hw = *find_hardware(target->hardware);
  const Pipeline p = c.run(hw, dump, [&](Pipeline& q) { return emit_pass(c, *target, hw, q); });
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
  auto target = resolve_target(c, target_flag, true);
  if (!target) return kExitSpecError;
  if (c.check && target->kind == EmitTarget::Kind::Cuda) {
    std::fputs(
        "fsdpgen: error: --check builds for the CPU target only (--target cpu): the CUDA "
        "backend's canaries are not written yet\n",
        stderr);
    return kExitUsage;
  }
  const Hardware hw = *find_hardware(target->hardware);
  const Pipeline p = c.run(
      hw, dump, [&](Pipeline& q) { return emit_pass(c, *target, hw, q); },
      [&](Pipeline& q) { return build_pass(c, *target, output, sources_dir, q); });
  if (p.failure != Failure::None) return exit_status(p.failure);
  out(p.build_report);
  return 0;
}

// A merged model directory's config.json, from the spec the checkpoint names
// (a note instead when it cannot be read there).
void write_hf_config(const std::string& dir, const std::string& spec) {
  const FrontendResult r = load_spec_file(spec);
  if (!r.spec) {
    std::fputs(fmt::format("fsdpgen: note: no config.json in {}: the checkpoint's spec {} cannot "
                           "be read from here\n",
                           dir, spec)
                   .c_str(),
               stderr);
    return;
  }
  std::ofstream(std::filesystem::path(dir) / "config.json")
      << hf_config_text(hf_model_of(r.spec->model));
}

int run_merge(const std::string& checkpoint, const std::string& output, const std::string& dtype,
              const std::string& max_shard_size) {
  // safetensors' spelling of the dtype (the flag's validator accepted the word).
  const DType t = dtype_named(dtype).value_or(DType::FP32);
  const char* st = t == DType::BF16 ? "BF16" : t == DType::FP16 ? "F16" : "F32";
  const int64_t max_bytes =
      max_shard_size.empty() ? 0 : shard_size_bytes(max_shard_size).value_or(0);
  try {
    const checkpoint_merged m = checkpoint_merge(checkpoint, output, st, max_bytes);
    if (max_bytes) write_hf_config(output, m.spec);
    out(fmt::format(
        "fsdpgen: wrote {}{} from {} (step {}): {} tensors, {} params, {}, {:.2f} MiB\n", output,
        max_bytes ? fmt::format(" ({} file{})", m.files, m.files == 1 ? "" : "s") : "",
        m.checkpoint, m.step, m.tensors, m.params, st, static_cast<double>(m.bytes) / (1 << 20)));
    return 0;
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return kExitSpecError;
  }
}

std::optional<std::string> read_text(const std::string& path) {
  try {
    return file_read_whole(path, kJsonFileMaxBytes);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return std::nullopt;
  }
}

// --ranks A,B: two ranks, or why not.
std::string parse_rank_pair(const std::string& text, int& a, int& b) {
  const std::string why =
      fmt::format("--ranks {}: expected two ranks of the trace as A,B (e.g. --ranks 0,3)", text);
  const size_t comma = text.find(',');
  if (comma == std::string::npos) return why;
  auto rank = [](std::string_view t, int& out) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return !t.empty() && ec == std::errc() && end == t.data() + t.size() && out >= 0;
  };
  const std::string_view all(text);
  return rank(all.substr(0, comma), a) && rank(all.substr(comma + 1), b) ? "" : why;
}

// Two ranks of one measured trace (--ranks A,B), in compare's tables.
int run_compare_ranks(const std::string& trace, const std::string& ranks, int top) {
  int a = 0, b = 0;
  if (const std::string why = parse_rank_pair(ranks, a, b); !why.empty()) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", why).c_str(), stderr);
    return kExitUsage;
  }
  const auto m = read_text(trace);
  if (!m) return kExitSpecError;
  try {
    out(compare_ranks_report(read_step_trace(*m, trace), a, b, top));
    return 0;
  } catch (const CompareError& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return kExitSpecError;
  }
}

// `measured` empty: `predicted` is the one trace of --ranks.
int run_compare(const std::string& predicted, const std::string& measured, int rank, int top,
                const std::string& merged, const std::string& ranks) {
  if (!ranks.empty() && !measured.empty()) {
    std::fputs(
        "fsdpgen: error: --ranks compares two ranks of one measured trace: give that trace "
        "alone, not two\n",
        stderr);
    return kExitUsage;
  }
  if (!ranks.empty()) return run_compare_ranks(predicted, ranks, top);
  if (measured.empty()) {
    std::fputs(
        "fsdpgen: error: compare needs a predicted and a measured trace, or one measured trace "
        "and --ranks A,B\n",
        stderr);
    return kExitUsage;
  }
  const auto p = read_text(predicted), m = read_text(measured);
  if (!p || !m) return kExitSpecError;
  if (const std::string overlap = file_output_overlap(merged, {predicted, measured});
      !merged.empty() && !overlap.empty()) {
    std::fputs(
        fmt::format("fsdpgen: error: {}: compare -o would overwrite a trace it reads\n", overlap)
            .c_str(),
        stderr);
    return kExitSpecError;
  }
  try {
    const StepTrace pt = read_step_trace(*p, predicted), mt = read_step_trace(*m, measured);
    out(compare_report(pt, mt, {rank, top}));
    if (!merged.empty() && !write_output(merged, merged_trace(pt, mt, rank))) return kExitSpecError;
    if (!merged.empty())
      out(
          fmt::format("\nboth steps, each stream's predicted track above its measured one: {} "
                      "(ui.perfetto.dev)\n",
                      merged));
    return 0;
  } catch (const CompareError& e) {
    std::fputs(fmt::format("fsdpgen: error: {}\n", e.what()).c_str(), stderr);
    return kExitSpecError;
  }
}

// Whether a first word that is no subcommand is a spec to build: an existing
// file, or a path or .fsdp name (a missing spec is then reported as such).
bool looks_like_spec_path(const std::string& word) {
  std::error_code ec;
  return std::filesystem::is_regular_file(word, ec) || word.find('/') != std::string::npos ||
         word.ends_with(".fsdp");
}

std::string unknown_subcommand_error(const std::string& word,
                                     const std::vector<std::string_view>& commands) {
  std::string msg = fmt::format("fsdpgen: error: unknown subcommand '{}'", word);
  if (std::string close = closest_match(word, commands); !close.empty())
    msg += fmt::format("; did you mean '{}'?", close);
  return msg + fmt::format(
                   " (no file of that name either); subcommands are {}, or a spec file to build "
                   "(fsdpgen spec.fsdp -o train)\nRun 'fsdpgen --help' for usage.\n",
                   quoted_choices(commands));
}

}  // namespace
}  // namespace fsdpgen

// The command line and its subcommand; main below catches what escapes.
static int run_fsdpgen(int argc, char** argv) {
  using fsdpgen::Common;
  CLI::App app{"fsdpgen: compiles a .fsdp spec into a specialized FSDP training binary", "fsdpgen"};
  app.require_subcommand(1);

  Common check_args, schedule_args, plan_args;
  bool dump = false;
  CLI::App* check =
      app.add_subcommand("check", "parse and check a spec; with --dump print it fully resolved");
  check_args.add_to(check, fsdpgen::Pass::Support, false);
  CLI::Option* dump_flag = check->add_flag(
      "--dump", dump, "print the resolved spec (every default filled in) in the spec language");
  std::string check_hf;
  check
      ->add_option("--hf", check_hf,
                   "compare the model with a Hugging Face model directory's config.json (or "
                   "that file): every difference at the spec's key; exit 1 when any")
      ->excludes(dump_flag);

  std::string format = "text", output;
  CLI::App* schedule =
      app.add_subcommand("schedule", "print the static schedule of one training step");
  schedule_args.add_to(schedule, fsdpgen::Pass::Cost, true);
  schedule
      ->add_option("--format", format,
                   "text (per stream), json, or trace (Chrome/Perfetto, predicted times)")
      ->check(CLI::IsMember({"text", "json", "trace"}));
  schedule->add_option("-o,--output", output, "write to this file instead of stdout");
  schedule_args.add_hardware_to(schedule);

  CLI::App* plan =
      app.add_subcommand("plan", "memory per rank by kind, peak, and predicted step time");
  plan_args.add_to(plan, fsdpgen::Pass::Cost, true);
  plan_args.add_hardware_to(plan);
  plan->footer(
      "Exit status: 0 the plan fits the device, 4 it does not (the whole plan is still printed, "
      "with changes that fit), 1 the spec has errors, 2 bad command line, 3 internal error.");

  Common emit_args, build_args;
  std::string emit_dir, emit_target, build_target;
  const std::string target_help =
      "cuda or cpu (default: cuda when a GPU is visible here, else cpu); cuda plans for --gpu";
  CLI::App* emit = app.add_subcommand("emit", "write the generated training program's C++ source");
  emit_args.add_to(emit, fsdpgen::Pass::Emit, true);
  emit->add_option("-o,--output", emit_dir, "directory for train.cpp")->required();
  emit->add_option("--target", emit_target, target_help)->check(CLI::IsMember({"cuda", "cpu"}));

  std::string binary, sources;
  CLI::App* build = app.add_subcommand(
      "build", "generate and compile the training binary (also: fsdpgen spec.fsdp -o train)");
  build_args.add_to(build, fsdpgen::Pass::Build, true);
  build->add_option("-o,--output", binary, "the executable to write")->required();
  build->add_option("--sources", sources, "keep the generated source in this directory");
  build->add_option("--target", build_target, target_help)->check(CLI::IsMember({"cuda", "cpu"}));
  build->add_flag("--check", build_args.check,
                  "for finding memory bugs: a red zone before and after every buffer, checked "
                  "after every op (ops run one at a time), and AddressSanitizer (CPU target)");

  std::string merge_in, merge_out, merge_dtype = "fp32", merge_max_shard;
  CLI::App* merge = app.add_subcommand(
      "merge",
      "write a checkpoint's weights with Hugging Face names: one safetensors file, or with "
      "--max-shard-size a model directory of shards and their index");
  merge
      ->add_option("checkpoint", merge_in,
                   "a step_N checkpoint directory, or a directory of them (its newest)")
      ->required();
  merge
      ->add_option("-o,--output", merge_out,
                   "the safetensors file to write (with --max-shard-size: a new directory)")
      ->required();
  merge
      ->add_option("--max-shard-size", merge_max_shard,
                   "write a model directory of files of at most this size (e.g. 5GB, 500MB, "
                   "2GiB, bytes), as transformers' save_pretrained")
      ->check(CLI::Validator(
          [](std::string& size) {
            return shard_size_bytes(size)
                       ? std::string()
                       : fmt::format(
                             "'{}' is not a size: bytes, or a number with kB, MB, GB, "
                             "KiB, MiB or GiB (e.g. 5GB)",
                             size);
          },
          "SIZE"));
  merge
      ->add_option("--dtype", merge_dtype,
                   "fp32 (default), bf16 or fp16; also spelled f32, f16, float32, bfloat16, "
                   "float16")
      ->check(CLI::Validator(
          [](std::string& word) {
            return fsdpgen::dtype_named(word)
                       ? std::string()
                       : fmt::format(
                             "unknown dtype '{}': fp32, bf16 or fp16 (or f32, f16, "
                             "float32, bfloat16, float16)",
                             word);
          },
          "DTYPE"));

  fsdpgen::CalibrateOptions calibrate_opts;
  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "measure this machine (its layer passes, optimizer, collectives and copies as the runtime "
      "runs them) into a hardware profile for plan and schedule --hardware");
  calibrate->add_option("specs", calibrate_opts.specs,
                        "specs whose steps to measure (default: a standard sweep of shapes)");
  calibrate->add_option("-o,--output", calibrate_opts.output, "the profile (JSON) to write");
  calibrate
      ->add_option("--target", calibrate_opts.target,
                   "cpu or cuda (default: cuda when a GPU is visible here, else cpu)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  calibrate->add_option("--gpu", calibrate_opts.gpu,
                        "cuda: the built-in hardware whose figures the profile refines "
                        "(default: h100-sxm)");
  calibrate
      ->add_option("--ranks", calibrate_opts.ranks,
                   "ranks on this node (default: as many as the specs put on a node, up to "
                   "its cores or GPUs)")
      ->check(CLI::Range(1, 1024));
  calibrate->add_flag("--quick", calibrate_opts.quick, "fewer runs per measurement (seconds)");
  calibrate->add_option("--world", calibrate_opts.world,
                        "number of ranks (replaces each spec's parallel.world)");
  calibrate->add_option(
      "--micro-batch", calibrate_opts.micro_batch,
      "sequences per rank per micro-batch (replaces each spec's train.micro_batch)");
  calibrate->add_option("--request", calibrate_opts.request,
                        "write what to measure to this file and stop (run the printed command "
                        "under srun on the cluster)");

  fsdpgen::CheckLayerOptions layer_opts;
  CLI::App* check_layer = app.add_subcommand(
      "check-layer",
      "check a custom layer before it trains: bounds and writes of every member, gradients "
      "against finite differences, determinism, 16-bit against fp32");
  check_layer->add_option("header", layer_opts.header, "the layer header")->required();
  check_layer->add_option("layer", layer_opts.layer, "the layer's class template")->required();
  check_layer
      ->add_option("--hyper", layer_opts.hyper,
                   "each hyper-parameter as name=value (e.g. --hyper d_model=8 d_ff=20)")
      ->expected(1, -1);
  check_layer->add_option("--width", layer_opts.width,
                          "the input's and output's width (default: the value of d_model)");
  check_layer->add_option("--tokens", layer_opts.tokens,
                          "rows of the input (default: 2 x context where the layer has a "
                          "hyper-parameter so named, else 6)");
  check_layer
      ->add_option("--dtype", layer_opts.dtype,
                   "bf16 or fp16: also run the layer in it against the reference (default fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  check_layer->add_option("--keep", layer_opts.keep,
                          "keep the generated check program in this directory");
  check_layer->footer(
      "Exit status: 0 every check passed, 1 a check failed or the layer does not compile, 2 bad "
      "command line.");

  std::string compare_predicted, compare_measured, compare_merged, compare_ranks;
  int compare_rank = 0, compare_top = 20;
  CLI::App* compare = app.add_subcommand(
      "compare",
      "a predicted step (schedule --format trace) against a measured one (./train --trace), op "
      "by op; or two ranks of one measured step (--ranks A,B)");
  compare
      ->add_option("predicted", compare_predicted,
                   "the predicted trace (with --ranks: the measured one)")
      ->required();
  compare->add_option("measured", compare_measured, "the measured trace");
  CLI::Option* compare_rank_option =
      compare->add_option("--rank", compare_rank, "the measured rank compared op by op (default 0)")
          ->check(CLI::NonNegativeNumber);
  compare->add_option("--top", compare_top, "ops listed, largest difference first (0: all)")
      ->check(CLI::NonNegativeNumber);
  CLI::Option* compare_output =
      compare->add_option("-o,--output", compare_merged,
                          "also write both steps as one Perfetto trace, each stream's predicted "
                          "track above its measured one");
  compare
      ->add_option("--ranks", compare_ranks,
                   "A,B: rank B of a measured trace against its rank A, op kind by op kind and op "
                   "by op (a straggler against a typical rank)")
      ->excludes(compare_rank_option)
      ->excludes(compare_output);

  std::string import_source, import_output;
  CLI::App* import_hf = app.add_subcommand(
      "import-hf",
      "write the spec of a Hugging Face model (GPT2LMHeadModel or LlamaForCausalLM) from its "
      "config.json, with default units, parallel and train sections to edit");
  import_hf
      ->add_option("source", import_source, "a Hugging Face model directory, or its config.json")
      ->required();
  import_hf->add_option("-o,--output", import_output, "the spec to write (default: stdout)");
  import_hf->footer(
      "Exit status: 0 written, 1 the config cannot be read or has keys no spec represents (all "
      "named) or the spec cannot be written, 2 bad command line.");

  fsdpgen::TuneCliOptions tune_opts;
  CLI::App* tune = app.add_subcommand(
      "tune",
      "the fastest configuration that fits: every sharding, units, recompute, offload, "
      "micro-batch x accumulation (same global batch), reduce and prefetch choice planned and "
      "timed, ranked");
  tune->add_option("spec", tune_opts.spec, "the .fsdp spec file")->required();
  tune->add_option("--world", tune_opts.world, "number of ranks (replaces parallel.world)");
  tune->add_option("--worlds", tune_opts.worlds,
                   "sweep these worlds instead (e.g. 8,16,32), the global batch kept");
  tune->add_option("--gpu", tune_opts.gpu,
                   "built-in hardware to tune for (default: h100-sxm where a GPU is visible, "
                   "else cpu)");
  tune->add_option("--hardware", tune_opts.hardware,
                   "a hardware profile `fsdpgen calibrate` measured (.json), or a built-in name");
  tune->add_option("-o,--output", tune_opts.output,
                   "write the winner: the spec with only the changed keys rewritten");
  tune->add_option("--top", tune_opts.top, "rows in the ranked table (default 10)");
  tune->add_option("--min-gain", tune_opts.min_gain_pct,
                   "-o writes the fastest only when it is predicted at least this many percent "
                   "faster per token than the spec as written, else the spec unchanged (default 5)")
      ->check(CLI::Range(0.0, 1000.0));
  tune->add_option("--write-candidates", tune_opts.write_candidates,
                   "write every planned candidate that fits as a spec into this directory "
                   "(candidate_NNN.fsdp, fastest first; candidates.tsv lists their predicted "
                   "steps): what tests/bench/tune/run.sh measures");
  tune->add_option("--keep", tune_opts.keep,
                   "knobs kept as written: sharding, units, recompute, offload, micro_batch, "
                   "reduce, prefetch, precision")
      ->expected(1, -1);
  tune->add_flag("--allow-batch-change", tune_opts.allow_batch_change,
                 "also try other global batches (each such row says so)");
  tune->add_flag("--time-passes", tune_opts.time_passes, "print where the search's time went");
  tune->footer(
      "Exit status: 0 something fits (ranked; -o written), 4 nothing fits (the smallest world "
      "that would is named), 1 the spec has errors or -o cannot be written, 2 bad command line.");

  // `fsdpgen spec.fsdp -o train` is `fsdpgen build spec.fsdp -o train`.
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<std::string_view> commands = {
      "check",     "schedule", "plan",        "emit",      "build", "merge",
      "calibrate", "compare",  "check-layer", "import-hf", "tune"};
  if (!args.empty() && !args[0].empty() && args[0][0] != '-' &&
      std::find(commands.begin(), commands.end(), args[0]) == commands.end()) {
    if (!fsdpgen::looks_like_spec_path(args[0])) {
      std::fputs(fsdpgen::unknown_subcommand_error(args[0], commands).c_str(), stderr);
      return fsdpgen::kExitUsage;
    }
    args.insert(args.begin(), "build");
  }
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fputs(
        fmt::format("fsdpgen: error: {}\nRun 'fsdpgen --help' for usage.\n", e.what()).c_str(),
        stderr);
    return fsdpgen::kExitUsage;
  }
  if (check->parsed()) return fsdpgen::run_check(check_args, dump, check_hf);
  if (schedule->parsed()) return fsdpgen::run_schedule(schedule_args, format, output);
  if (plan->parsed()) return fsdpgen::run_plan(plan_args);
  if (emit->parsed()) return fsdpgen::run_emit(emit_args, emit_target, emit_dir);
  if (build->parsed()) return fsdpgen::run_build(build_args, build_target, binary, sources);
  if (merge->parsed()) return fsdpgen::run_merge(merge_in, merge_out, merge_dtype, merge_max_shard);
  if (calibrate->parsed()) return fsdpgen::run_calibrate(calibrate_opts, fsdpgen::gpu_visible());
  if (check_layer->parsed()) return fsdpgen::run_check_layer(layer_opts);
  if (import_hf->parsed()) return fsdpgen::run_import_hf(import_source, import_output);
  if (tune->parsed()) return fsdpgen::run_tune(tune_opts, fsdpgen::gpu_visible());
  if (compare->parsed())
    return fsdpgen::run_compare(compare_predicted, compare_measured, compare_rank, compare_top,
                                compare_merged, compare_ranks);
  return fsdpgen::kExitUsage;
}

// What a reader throws past the subcommands' own handlers is an internal
// error, said in one line: never std::terminate's abort.
int main(int argc, char** argv) {
  try {
    return run_fsdpgen(argc, argv);
  } catch (const std::exception& e) {
    std::fputs(fmt::format("fsdpgen: internal error: {}\n", e.what()).c_str(), stderr);
  } catch (...) {
    std::fputs("fsdpgen: internal error: an exception of unknown type\n", stderr);
  }
  return fsdpgen::kExitInternal;
}
