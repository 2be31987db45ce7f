// Report: plan's and schedule's printouts, assembled from each IR's printer.
#include "codegen/planner/Report.h"

#include <vector>

#include <fmt/format.h>

#include "codegen/planner/Alternatives.h"
#include "codegen/planner/Fit.h"
#include "dsl/Layers.h"
#include "dsl/Values.h"

namespace fsdpgen {
namespace {

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

// Whether the plan fits, and by how much: on a GPU the device arena against
// its memory (and the host arena against the node's RAM), on a CPU both
// arenas against the one RAM.
std::string fits_lines(const MemoryPlan& m, const Hardware& hw) {
  const int64_t peak = m.device_arena_bytes, usable = usable_bytes(hw);
  const int64_t host = m.host_arena_bytes;
  const bool fits = plan_fits(m, hw);
  std::string out;
  if (hw.gpu || host == 0)
    out += fmt::format(
        "fits: {}: peak {} of {} usable ({} {} minus {} reserved for the runtime), {:.1f}%\n",
        fits ? "yes" : "NO", gib_text(peak), gib_text(usable), hw.name, gib_text(hw.memory_bytes),
        gib_text(reserved_bytes(hw)),
        100.0 * static_cast<double>(peak) / static_cast<double>(usable));
  else
    out += fmt::format(
        "fits: {}: peak {} and host arena {} together of {} usable (one RAM), {:.1f}%\n",
        fits ? "yes" : "NO", gib_text(peak), gib_text(host), gib_text(usable),
        100.0 * static_cast<double>(peak + host) / static_cast<double>(usable));
  if (hw.gpu && host > 0)
    out += fmt::format(
        "      host arena {} of {} usable ({} of the node's RAM per GPU, a tenth kept "
        "for the process), {:.1f}%{}\n",
        gib_text(host), gib_text(usable_host_bytes(hw)), gib_text(hw.host_memory_bytes),
        100.0 * static_cast<double>(host) / static_cast<double>(usable_host_bytes(hw)),
        host > usable_host_bytes(hw) ? ": does NOT fit" : "");
  return out;
}

// For a plan that does not fit: the changes of tune's search that do.
std::string alternatives_lines(const Spec& s, const Hardware& hw) {
  const ParallelSpec& par = s.parallel;
  const std::vector<Alternative> alts = fitting_alternatives(s, hw);
  if (alts.empty())
    return fmt::format(
        "nothing fits on {} x {}, with the global batch kept or changed (tune's search: "
        "sharding, units, recompute, offload, micro-batch and accumulation); "
        "`fsdpgen tune` names the smallest world that fits\n",
        par.world, hw.name);
  std::string out = fmt::format(
      "changes that fit on {} x {} (tune's search), the global batch kept unless "
      "a row says so, fastest per token per GPU first:\n",
      par.world, hw.name);
  for (const Alternative& a : alts)
    out += fmt::format(
        "  step {:9.1f} ms {:9.0f} tok/s/GPU  peak {:>10}  {}{}\n", a.step_ms,
        a.tokens_per_s_per_gpu, gib_text(a.peak_bytes), a.change,
        a.batch_changed ? fmt::format(" [global batch {} sequences]", a.global_batch) : "");
  return out;
}

}  // namespace

std::string gib_text(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1LL << 30));
}

std::string plan_report(const Spec& s, const Units& units, const Schedule& schedule,
                        const MemoryPlan& memory, const Timeline& timeline, const Hardware& hw,
                        std::string_view why) {
  const ParallelSpec& par = s.parallel;
  std::string out = fmt::format("plan of {} on {} x {}: {} ({})\n", s.model.name, par.world,
                                hw.name, hw.description, why);
  const std::string figures = print_hardware(hw);
  out += figures.substr(figures.find('\n') + 1);  // its figures and sources, not its name
  out += fmt::format(
      "model: {} parameters ({} padded elements{}) in {} units; {} with shard group {} x {} "
      "replica{}; "
      "{} micro-batch{} of {} x {} tokens per rank\n",
      units.total_params, units.total_padded_elems, vocab_padding_note(units), units.units.size(),
      to_string(par.sharding), par.shard_group, par.replicas(), par.replicas() == 1 ? "" : "s",
      par.accumulate.micro_batches, par.accumulate.micro_batches == 1 ? "" : "es",
      schedule.micro_batch, s.model.context);
  for (const CustomLayerSpec& c : s.model.custom)
    out += custom_layer_line(c);
  out += print_memory_plan(schedule, memory);
  out += fits_lines(memory, hw);
  out += print_timeline(schedule, timeline);
  if (!plan_fits(memory, hw)) out += alternatives_lines(s, hw);
  return out;
}

std::string schedule_text(const Schedule& s) {
  return print_units(s.units) + print_schedule(s);
}

}  // namespace fsdpgen
