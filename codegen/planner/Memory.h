// Memory: Schedule -> MemoryPlan. Every buffer gets an offset in one arena
// per memory space (device, and host when offloading) from its lifetime in
// the schedule's issue order: persistent buffers first, then interval
// allocation (first fit by decreasing size) of the others. The peak is the
// arena size; the plan also breaks the peak down by buffer kind.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/planner/Schedule.h"

namespace fsdpgen {

struct Placement {
  int buffer = 0;
  int64_t offset = 0;  // bytes, in the arena of the buffer's space
  int first_op = 0;    // issue position of the first use (persistent: 0)
  int last_op = 0;     // issue position of the Free (persistent: last op)
};

struct MemoryPlan {
  std::vector<Placement> placements;  // indexed by buffer id
  int64_t device_arena_bytes = 0;     // = device peak
  int64_t host_arena_bytes = 0;
  int64_t naive_bytes = 0;  // sum of all device buffers (no reuse)
  int peak_op = 0;          // issue position where live device bytes peak
  // Device bytes live at peak_op, by BufferKind.
  std::vector<int64_t> peak_by_kind;
  // Device bytes of each kind summed over buffers (no reuse), for the report.
  std::vector<int64_t> total_by_kind;
  int64_t live_peak_bytes = 0;  // max over positions of live device bytes (<= arena size)
  int64_t red_zone_bytes = 0;   // MemoryOptions::red_zone_bytes (0: none)
};

struct MemoryOptions {
  int64_t alignment = 256;  // every buffer offset is a multiple of this
  bool reuse = true;        // off: every buffer gets its own range (for debugging)
  // For `fsdpgen build --check`: every buffer sits between two red zones of
  // this many bytes (a multiple of alignment) that no other buffer live at
  // the same time overlaps; a placement's offset is its data's. 0: none.
  int64_t red_zone_bytes = 0;
};

MemoryPlan plan_memory(const Schedule& s, const MemoryOptions& options = {});

// The most bytes live at one issue position in each space, each buffer
// counted as the arena places it (aligned, between its red zones): what
// plan_memory(s, options)'s arenas hold at once, so never more than their
// sizes; found without placing anything.
struct LivePeaks {
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
};
LivePeaks live_peaks(const Schedule& s, const MemoryOptions& options = {});

std::string print_memory_plan(const Schedule& s, const MemoryPlan& m);

}  // namespace fsdpgen
