// memory_report: per-step tracking and the end-of-run summary.
#include "runtime/train/memory_report.h"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>

#include "runtime/allocations.h"
#include "runtime/arena.h"
#include "runtime/check.h"
#include "runtime/human.h"
#include "runtime/machine_memory.h"

namespace {

std::string in_mib(int64_t bytes) {
  return fmt::format("{:.2f} MiB", mib(bytes));
}

std::string bytes_added(int64_t bytes) {
  return bytes <= 0 ? "nothing" : fmt::format("{} B ({})", bytes, in_mib(bytes));
}

// What allocating the CPU's arenas (in_pages: the plan's in whole pages with
// the guards) grew the process's anonymous memory by, and why that exceeds the plan's bytes:
// each arena is its own mapping of whole pages with a guard after it.
std::string arena_growth_text(const program& p, int64_t growth, int64_t in_pages) {
  const bool both = p.plan.host_arena_bytes > 0;
  const std::string planned =
      both ? fmt::format("the plan's {} + {} B", with_commas(p.plan.device_arena_bytes),
                         with_commas(p.plan.host_arena_bytes))
           : fmt::format("the plan's {} B", with_commas(p.plan.device_arena_bytes));
  const std::string why =
      fmt::format("{} rounded up to whole {} KiB pages with a {} KiB guard after {}", planned,
                  host_page_bytes() / 1024, kArenaGuardBytes / 1024, both ? "each" : "it");
  const int64_t over = in_pages - p.plan.device_arena_bytes - p.plan.host_arena_bytes;
  if (growth == in_pages)
    return fmt::format(
        "allocating the arena{} grew the process's anonymous memory by {} B: {} ({} B more)",
        both ? "s" : "", with_commas(growth), why, with_commas(over));
  return fmt::format(
      "allocating the arena{} grew the process's anonymous memory by {} B, not the {} B expected: "
      "{}",
      both ? "s" : "", with_commas(growth), with_commas(in_pages), why);
}

// memory_reading::set_up_beside_arena_bytes, the worst rank's, said with what it counts.
std::string set_up_beside_text(int64_t bytes) {
  return fmt::format(
      " | set-up beside the arena: {} B ({}) of anonymous memory gained from the backend's "
      "creation to the first step (heap, thread stacks, library buffers; the arena's own pages "
      "left out)",
      with_commas(bytes), in_mib(bytes));
}

}  // namespace

void memory_watch_step(memory_watch& w, const memory_reading& now) {
  ++w.steps;
  if (w.steps == w.settle_steps) w.settled = now;
  if (w.steps > w.settle_steps) {
    w.host_growth_bytes =
        std::max(w.host_growth_bytes, now.host_anonymous_bytes - w.settled.host_anonymous_bytes);
    w.device_growth_bytes =
        std::max(w.device_growth_bytes, now.device_used_bytes - w.settled.device_used_bytes);
  }
  w.arena_resident_min_bytes = std::min(w.arena_resident_min_bytes, now.arena_resident_bytes);
  w.device_peak_bytes = std::max(w.device_peak_bytes, now.device_used_bytes);
  w.device_arena_bytes = now.device_arena_bytes;
  w.arena_growth_bytes = now.arena_growth_bytes;
  w.set_up_beside_arena_bytes = now.set_up_beside_arena_bytes;
}

std::string memory_report(const memory_watch& w, const program& p, int64_t warmup, bool lead) {
  const allocations_counted counted = allocations_so_far();
  int64_t most[9] = {host_peak_resident_bytes(), w.host_growth_bytes,  w.device_growth_bytes,
                     w.device_peak_bytes,        w.device_arena_bytes, counted.own,
                     counted.libraries,          w.arena_growth_bytes, w.set_up_beside_arena_bytes};
  int64_t least = w.arena_resident_min_bytes;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, most, 9, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD));
  const std::string libraries = allocations_library_names();
  if (!lead || w.steps == 0) return "";
  const bool gpu = most[3] >= 0;
  const auto [host_peak, host_growth, device_growth, device_peak, device_arena, own, in_libraries,
              arena_growth, set_up_beside] = most;
  const int64_t host_arenas_in_pages =
      (p.plan.host_arena_bytes > 0 ? arena_mapped_bytes(p.plan.host_arena_bytes) : 0) +
      (gpu ? 0 : arena_mapped_bytes(p.plan.device_arena_bytes));
  const std::string settle =
      w.steps > w.settle_steps
          ? fmt::format("the steps after the first{} added",
                        w.settle_steps == 1 ? "" : fmt::format(" {}", w.settle_steps))
          : "";
  std::string out = "memory per rank, as the machine counts it: ";
  if (gpu) {
    out += fmt::format(
        "device arena {} in use per the driver (planned {}) | GPU {} in use at most, {} of it "
        "beside the arena (CUDA context, cuBLASLt, NCCL, other processes){} | host {} resident at "
        "most{}{}\n",
        in_mib(device_arena), in_mib(p.plan.device_arena_bytes), in_mib(device_peak),
        in_mib(device_peak - device_arena),
        settle.empty() ? ""
                       : fmt::format(" | {} {} on the GPU", settle, bytes_added(device_growth)),
        in_mib(host_peak),
        p.plan.host_arena_bytes > 0
            ? fmt::format(" (pinning the host arena grew it by {} B, {} B planned in whole pages)",
                          with_commas(arena_growth), with_commas(host_arenas_in_pages))
            : "",
        settle.empty() ? "" : fmt::format(", {} {}", settle, bytes_added(host_growth)));
  } else {
    out += fmt::format(
        "{}; {} B of it resident now{} | process {} resident at most{}\n",
        arena_growth_text(p, arena_growth, host_arenas_in_pages), with_commas(least),
        set_up_beside == kNotMeasuredBytes ? "" : set_up_beside_text(set_up_beside),
        in_mib(host_peak),
        settle.empty() ? "" : fmt::format(" | {} {}", settle, bytes_added(host_growth)));
  }
  out += fmt::format("allocations in steps{}: {} by fsdpgen, {} inside libraries{}\n",
                     warmup ? fmt::format(" after the first {}", warmup) : "", with_commas(own),
                     with_commas(in_libraries),
                     libraries.empty() ? "" : fmt::format(" ({})", libraries));
  return out;
}
