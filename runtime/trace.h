// trace: the measured timeline of one step as a Chrome/Perfetto trace, in
// the form of the planner's predicted trace (`fsdpgen schedule --format
// trace`): one process per rank, one track per stream, one event per op with
// the op's planned fields as args.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/program.h"

// The host clock that per-op times taken on the host are read from (ns).
inline int64_t trace_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// start_ns/end_ns: per rank, per op, from the start of the step.
std::string trace_json(const program& p, int64_t step,
                       const std::vector<std::vector<int64_t>>& start_ns,
                       const std::vector<std::vector<int64_t>>& end_ns);

// Fraction of collective time (all-gather, reduce-scatter, all-reduce) that
// overlapped with compute on the same rank, over all ranks: 1 = fully hidden;
// negative when the step has no collectives.
double trace_hidden_comm_fraction(const program& p,
                                  const std::vector<std::vector<int64_t>>& start_ns,
                                  const std::vector<std::vector<int64_t>>& end_ns);
