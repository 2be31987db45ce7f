// memory_report: a run's memory as the machine counted it (backend.h
// memory_reading, after every step) and the summary every rank reduces at
// the end, printed beside the plan: the arena as the kernel or the driver
// counts it, what set-up left beside it, the process's peak, whether the
// steps after the warm-up added anything, and the allocations made inside
// steps (runtime/allocations.h).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "runtime/backend.h"
#include "runtime/program.h"

struct memory_watch {
  int64_t settle_steps = 1;  // steps after which nothing may grow: max(1, warm-up steps)
  int64_t steps = 0;         // steps seen
  memory_reading settled;    // the reading after settle_steps
  // The most either grew since settled: on the host its anonymous memory,
  // as pages of mapped token files that a step reads are not its growth.
  int64_t host_growth_bytes = 0, device_growth_bytes = 0;
  int64_t arena_resident_min_bytes = std::numeric_limits<int64_t>::max();
  int64_t device_peak_bytes = -1;
  int64_t device_arena_bytes = -1;
  int64_t arena_growth_bytes = 0;
  int64_t set_up_beside_arena_bytes = kNotMeasuredBytes;
};

// After each step.
void memory_watch_step(memory_watch& w, const memory_reading& now);
// Collective over MPI_COMM_WORLD: the worst rank's figures, as the lines
// rank 0 prints (empty elsewhere). warmup: steps whose allocations were not
// counted.
std::string memory_report(const memory_watch& w, const program& p, int64_t warmup, bool lead);
