// Tune: the `fsdpgen tune` command: flags, the search, its report and -o.
#include "codegen/cli/Tune.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>

#include "codegen/cli/Common.h"
#include "codegen/driver/Target.h"
#include "codegen/planner/Accuracy.h"
#include "codegen/planner/Calibrated.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Tune.h"
#include "dsl/Frontend.h"
#include "dsl/Source.h"

namespace fsdpgen {
namespace {

// Without a fit at the given world, worlds up to this many times it are tried.
constexpr int64_t kLargestWorldFactor = 64;

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / (int64_t{1} << 30);
}

// "8,16,32" -> {8, 16, 32}; empty after printing which item is not a positive count.
std::optional<std::vector<int64_t>> parse_worlds(const std::string& text) {
  std::vector<int64_t> worlds;
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 1 || v > (int64_t{1} << 20)) {
      error(
          fmt::format("--worlds {}: '{}' is not a world size (a count of ranks from 1 to {}); "
                      "give them separated by commas, e.g. --worlds 8,16,32",
                      text, item, int64_t{1} << 20));
      return std::nullopt;
    }
    worlds.push_back(v);
    at = comma + 1;
  }
  return worlds;
}

// --hardware, else --gpu, else what a build here targets (as plan's).
std::optional<Hardware> tune_hardware(const TuneCliOptions& o, bool gpu_visible) {
  const std::string name = !o.hardware.empty() ? o.hardware
                           : !o.gpu.empty()    ? o.gpu
                           : gpu_visible       ? "h100-sxm"
                                               : "cpu";
  std::optional<Hardware> hw;
  try {
    hw = hardware_named(name);
  } catch (const std::exception& e) {
    error(e.what());
    return std::nullopt;
  }
  if (!o.hardware.empty() && !o.gpu.empty() && hw->name != o.gpu) {
    error(fmt::format("--hardware {} describes '{}'{}, not --gpu {}; give one of them", o.hardware,
                      hw->name, hw->profile ? fmt::format(" ({})", hw->description) : "", o.gpu));
    return std::nullopt;
  }
  return hw;
}

std::string memory_cell(int64_t bytes, int64_t room) {
  return fmt::format("{:.2f} ({:+.2f})", gib(bytes), gib(room - bytes));
}

// A candidate's changes, and how it changes the numerics where it does.
std::string changes_text(const TuneCandidate& c) {
  std::string changes =
      c.changes.empty() ? "(the spec as written)" : fmt::format("{}", fmt::join(c.changes, ", "));
  if (!c.numerics.empty()) changes += fmt::format(" [numerics: {}]", fmt::join(c.numerics, "; "));
  return changes;
}

// One row of the table: rank, step, tok/s per GPU, MFU, device and host
// peaks with the room left, exposed communication, and the changes.
std::string row(const std::string& rank, const TuneCandidate& c, const Hardware& hw) {
  std::string changes = changes_text(c);
  if (c.batch_changed)
    changes += fmt::format(" [global batch {} sequences]", c.spec.global_batch());
  if (c.ops_estimated > 0)
    changes += fmt::format(" [{} ops not measured by the profile]", c.ops_estimated);
  const int64_t device_room = hw.gpu ? usable_bytes(hw) : usable_bytes(hw) - c.host_bytes;
  const int64_t host_room = hw.gpu ? usable_host_bytes(hw) : usable_bytes(hw) - c.device_bytes;
  return fmt::format("{:>5} {:>11.1f} {:>11.0f} {:>6.1f}% {:>18} {:>18} {:>10.1f}  {}\n", rank,
                     c.step_ms, c.tokens_per_s_per_gpu, 100 * c.mfu,
                     memory_cell(c.device_bytes, device_room), memory_cell(c.host_bytes, host_room),
                     c.exposed_comm_ms, changes);
}

std::string header() {
  return fmt::format("{:>5} {:>11} {:>11} {:>7} {:>18} {:>18} {:>10}  {}\n", "rank", "step ms",
                     "tok/s/GPU", "MFU", "device GiB (free)", "host GiB (free)", "exposed ms",
                     "changes from the spec");
}

// What the best candidate that does not fit lacks.
std::string lacks(const TuneCandidate& c, const Hardware& hw) {
  std::vector<std::string> parts;
  if (hw.gpu) {
    if (c.device_bytes > usable_bytes(hw))
      parts.push_back(
          fmt::format("{:.2f} GiB of device memory", gib(c.device_bytes - usable_bytes(hw))));
    if (c.host_bytes > usable_host_bytes(hw))
      parts.push_back(
          fmt::format("{:.2f} GiB of host memory", gib(c.host_bytes - usable_host_bytes(hw))));
  } else {
    parts.push_back(
        fmt::format("{:.2f} GiB of memory", gib(c.device_bytes + c.host_bytes - usable_bytes(hw))));
  }
  return fmt::format("{}", fmt::join(parts, " and "));
}

// Nothing fits at the given world: the smallest multiple of it (same global
// batch) where something does, with its changes.
std::string smallest_world(const Spec& spec, const Hardware& hw, const TuneOptions& base) {
  const ParallelSpec& p = spec.parallel;
  const int64_t world = p.world;
  const int64_t global = spec.global_batch();
  for (int64_t w = 2 * world; w <= kLargestWorldFactor * world; w *= 2) {
    if (w % std::min(p.ranks_per_node, w) != 0) continue;
    TuneOptions o = base;
    o.top = 1;
    o.worlds = {w};
    // A global batch that does not split over w ranks changes (and says so).
    o.allow_batch_change = base.allow_batch_change || global % w != 0;
    TuneResult r = tune(spec, hw, o);
    if (r.top.empty()) continue;
    const TuneCandidate& c = r.top.front();
    return fmt::format("the smallest world that fits: {} ranks ({}{}; step {:.1f} ms)", w,
                       fmt::join(c.changes, ", "),
                       c.batch_changed ? fmt::format("; global batch {} sequences",
                                                     w * c.spec.train.micro_batch *
                                                         c.spec.parallel.accumulate.micro_batches)
                                       : "",
                       c.step_ms);
  }
  return fmt::format(
      "nothing fits up to {} ranks either (the global batch{} kept); a larger device, or a "
      "smaller model or batch (--allow-batch-change){} is needed",
      kLargestWorldFactor * world, base.allow_numerics ? "" : " and the numerics",
      base.allow_numerics ? "" : " or other numerics (--allow-numerics)");
}

}  // namespace

int run_tune(const TuneCliOptions& o, bool gpu_visible) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  if (std::string e = unknown_knob_error(o.keep); !e.empty()) {
    error(e);
    return kExitUsage;
  }
  if (o.top < 1) {
    error(fmt::format("--top {}: must be at least 1", o.top));
    return kExitUsage;
  }
  TuneOptions options;
  options.top = o.top;
  options.keep = o.keep;
  options.allow_batch_change = o.allow_batch_change;
  options.allow_numerics = o.allow_numerics;
  if (!o.worlds.empty()) {
    if (o.world) {
      error("--world and --worlds: give one of them (--worlds sweeps the world)");
      return kExitUsage;
    }
    auto worlds = parse_worlds(o.worlds);
    if (!worlds) return kExitUsage;
    options.worlds = *worlds;
  }
  std::optional<Hardware> hw = tune_hardware(o, gpu_visible);
  if (!hw) return kExitUsage;
  SpecOverrides overrides;
  overrides.world = o.world;
  FrontendResult fe = load_spec_file(o.spec, overrides);
  std::fputs(fe.diagnostics.c_str(), stderr);
  if (!fe.spec) return kExitSpecError;
  const Spec& spec = *fe.spec;
  const double front_s = std::chrono::duration<double>(Clock::now() - started).count();

  const TuneResult r = tune(spec, *hw, options);
  const ParallelSpec& p = spec.parallel;
  const int64_t global = spec.global_batch();
  out(fmt::format("tune of {} on {} x {}: {}\n", spec.model.name,
                  options.worlds.empty() ? std::to_string(p.world)
                                         : fmt::format("{{{}}}", fmt::join(options.worlds, ",")),
                  hw->name, hw->description));
  out(fmt::format("figures: {}\n", r.source));
  const int64_t widest = options.worlds.empty()
                             ? p.world
                             : *std::max_element(options.worlds.begin(), options.worlds.end());
  const Accuracy accuracy =
      prediction_accuracy(*hw, widest, widest / std::max<int64_t>(1, p.ranks_per_node));
  out(fmt::format("measured error: {}\n", accuracy.text));
  if (accuracy.expected)
    out(fmt::format(
        "expect: a real step {} the predicted one in every row (tokens/s and MFU divided alike)\n",
        ratio_range(*accuracy.expected)));
  out(fmt::format(
      "{} candidates: {} planned in full ({} fit), {} pruned by a memory lower bound over the "
      "{}, {} by a time lower bound at or over the top {}'s slowest; searched in {:.2f} s\n",
      r.candidates, r.planned, r.fitting, r.pruned_memory,
      hw->gpu ? "device's or host's room" : "memory's room", r.pruned_time, o.top,
      r.bound_s + r.plan_s));
  out(options.allow_batch_change
          ? "global batch: may change (--allow-batch-change); rows that change it say so\n"
          : fmt::format("global batch: {} sequences (world x micro_batch x micro_batches) in every "
                        "candidate\n",
                        global));
  const PrecisionSpec& pr = p.precision;
  if (options.allow_numerics)
    out("numerics: may change (--allow-numerics); rows that change them say [numerics: ...]\n");
  else
    out(fmt::format("numerics: the spec's in every candidate (param {}, reduce {}, master {}){}\n",
                    to_string(pr.param), to_string(pr.reduce), to_string(pr.master),
                    r.held_numerics == 0
                        ? ""
                        : fmt::format("; {} that change them not searched (--allow-numerics)",
                                      r.held_numerics)));
  for (const std::string& n : r.notes)
    out(fmt::format("note: {}\n", n));
  if (!o.keep.empty()) out(fmt::format("kept as written: {}\n", fmt::join(o.keep, ", ")));

  if (o.time_passes)
    std::fputs(fmt::format("tune: front end {:.3f} s, enumerate and bound {:.3f} s, plan in full "
                           "{:.3f} s ({} plans, {:.2f} ms each)\n",
                           front_s, r.bound_s, r.plan_s, r.planned,
                           r.planned ? 1e3 * r.plan_s / static_cast<double>(r.planned) : 0.0)
                   .c_str(),
               stderr);

  if (r.top.empty()) {
    out(fmt::format("nothing fits on {} x {}", p.world, hw->name));
    if (r.best_unfit)
      out(fmt::format("; the closest ({}) lacks {}",
                      r.best_unfit->changes.empty()
                          ? "the spec as written"
                          : fmt::format("{}", fmt::join(r.best_unfit->changes, ", ")),
                      lacks(*r.best_unfit, *hw)));
    out("\n");
    if (options.worlds.empty()) out(smallest_world(spec, *hw, options) + "\n");
    return kExitDoesNotFit;
  }

  out(fmt::format("\nthe {} fastest that fit:\n", r.top.size()));
  out(header());
  for (size_t i = 0; i < r.top.size(); ++i)
    out(row(fmt::format("{}{}", r.top[i].own ? "*" : "", i + 1), r.top[i], *hw));
  if (r.own_rank > 0) {
    out(fmt::format("the spec as written (*) ranks {} of the {}\n", r.own_rank, r.top.size()));
  } else if (r.own) {
    out(row(r.own->fits ? "*" : "*NO", *r.own, *hw));
    out(fmt::format("the spec as written (*) {}; the winner is {:.2f}x faster\n",
                    r.own->fits ? fmt::format("is not in the top {}", r.top.size())
                                : "does not fit: it lacks " + lacks(*r.own, *hw),
                    r.own->step_ms / r.top.front().step_ms));
  }

  out("\nPareto front of the planned candidates (none is both faster and smaller):\n");
  out(header());
  for (const TuneCandidate& c : r.pareto)
    out(row("", c, *hw));
  if (r.best_unfit) {
    out("\nthe fastest planned candidate that does not fit:\n");
    out(row("NO", *r.best_unfit, *hw));
    out(fmt::format("  it lacks {}\n", lacks(*r.best_unfit, *hw)));
  }

  if (o.output.empty() && o.write_candidates.empty()) return 0;
  std::string text, why;
  if (!read_file(o.spec, text, why)) {
    error(fmt::format("cannot read spec file '{}': {}", o.spec, why));
    return kExitSpecError;
  }
  // The text says the spec as read without --world's override.
  const FrontendResult as_written = load_spec_file(o.spec);
  const Spec& from = as_written.spec ? *as_written.spec : spec;
  auto write = [&](const std::string& path, const Spec& to) {
    std::ofstream f(path, std::ios::binary);
    f << rewrite_spec_text(o.spec, text, from, to);
    f.close();
    if (!f) error(fmt::format("cannot write '{}'", path));
    return static_cast<bool>(f);
  };
  if (!o.output.empty()) {
    const TuneCandidate& best = r.top.front();
    const double gain_pct =
        r.own && r.own->fits ? 100 * (r.own->ms_per_token / best.ms_per_token - 1) : 0;
    const bool keep_own =
        r.own && r.own->fits && !best.changes.empty() && gain_pct < o.min_gain_pct;
    if (!write(o.output, keep_own ? r.own->spec : best.spec)) return kExitSpecError;
    if (keep_own)
      out(
          fmt::format("\nwrote {}: {} unchanged: the fastest ({}) is predicted only {:.1f}% "
                      "faster, under --min-gain {:g}% (within the cost model's error)\n",
                      o.output, o.spec, fmt::join(best.changes, ", "), gain_pct, o.min_gain_pct));
    else
      out(fmt::format("\nwrote {}: {} with {}\n", o.output, o.spec,
                      best.changes.empty() ? "no change (the spec as written is the fastest)"
                                           : fmt::format("{} (predicted {:.1f}% faster)",
                                                         changes_text(best), gain_pct)));
  }
  if (!o.write_candidates.empty()) {
    // Every planned candidate that fits, fastest per token first: what a
    // benchmark measures to check the ranking (tests/bench/tune/run.sh).
    std::vector<const TuneCandidate*> fit;
    for (const TuneCandidate& c : r.all_planned)
      if (c.fits) fit.push_back(&c);
    std::stable_sort(fit.begin(), fit.end(), [](const TuneCandidate* a, const TuneCandidate* b) {
      return a->ms_per_token < b->ms_per_token;
    });
    std::error_code ec;
    std::filesystem::create_directories(o.write_candidates, ec);
    std::string index = "file\trank\tpredicted_step_ms\ttokens_per_s_per_gpu\town\tchanges\n";
    for (size_t i = 0; i < fit.size(); ++i) {
      const std::string name = fmt::format("candidate_{:03}.fsdp", i + 1);
      if (!write(o.write_candidates + "/" + name, fit[i]->spec)) return kExitSpecError;
      index += fmt::format("{}\t{}\t{:.6g}\t{:.6g}\t{}\t{}\n", name, i + 1, fit[i]->step_ms,
                           fit[i]->tokens_per_s_per_gpu, fit[i]->own ? "yes" : "no",
                           changes_text(*fit[i]));
    }
    std::ofstream f(o.write_candidates + "/candidates.tsv", std::ios::binary);
    f << index;
    f.close();
    if (!f) {
      error(fmt::format("cannot write '{}/candidates.tsv'", o.write_candidates));
      return kExitSpecError;
    }
    out(fmt::format("wrote {} candidates that fit to {}/ (candidates.tsv lists them)\n", fit.size(),
                    o.write_candidates));
  }
  return 0;
}

Command add_tune_command(CLI::App& app) {
  auto o = std::make_shared<TuneCliOptions>();
  CLI::App* tune = app.add_subcommand(
      "tune",
      "the fastest configuration that fits: every sharding, units, recompute, offload, "
      "micro-batch x accumulation (same global batch), reduce and prefetch choice that keeps the "
      "model's math planned and timed, ranked");
  tune->add_option("spec", o->spec, "the .fsdp spec file")->required();
  tune->add_option("--world", o->world, "number of ranks (replaces parallel.world)");
  tune->add_option("--worlds", o->worlds,
                   "sweep these worlds instead (e.g. 8,16,32), the global batch kept");
  tune->add_option("--gpu", o->gpu,
                   "built-in hardware to tune for (default: h100-sxm where a GPU is visible, "
                   "else cpu)");
  tune->add_option("--hardware", o->hardware,
                   "a hardware profile `fsdpgen calibrate` measured (.json), or a built-in name");
  tune->add_option("-o,--output", o->output,
                   "write the winner: the spec with only the changed keys rewritten");
  tune->add_option("--top", o->top, "rows in the ranked table (default 10)");
  tune->add_option("--min-gain", o->min_gain_pct,
                   "-o writes the fastest only when it is predicted at least this many percent "
                   "faster per token than the spec as written, else the spec unchanged (default 5)")
      ->check(CLI::Range(0.0, 1000.0));
  tune->add_option("--write-candidates", o->write_candidates,
                   "write every planned candidate that fits as a spec into this directory "
                   "(candidate_NNN.fsdp, fastest first; candidates.tsv lists their predicted "
                   "steps): what tests/bench/tune/run.sh measures");
  tune->add_option("--keep", o->keep,
                   "knobs kept as written: sharding, units, recompute, offload, micro_batch, "
                   "reduce, prefetch, precision")
      ->expected(1, -1);
  tune->add_flag("--allow-batch-change", o->allow_batch_change,
                 "also try other global batches (each such row says so)");
  tune->add_flag("--allow-numerics", o->allow_numerics,
                 "also try changes of the numerics: the reduce dtype, and micro-batch gradients "
                 "summed in a 16-bit reduce dtype (each such row says [numerics: ...]; --keep "
                 "precision or reduce pins one)");
  tune->add_flag("--time-passes", o->time_passes, "print where the search's time went");
  tune->footer(
      "Exit status: 0 something fits (ranked; -o written), 4 nothing fits (the smallest world "
      "that would is named), 1 the spec has errors or -o cannot be written, 2 bad command line.");
  return {tune, [o] { return run_tune(*o, gpu_visible()); }};
}

}  // namespace fsdpgen
