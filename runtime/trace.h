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

// What the run measured besides the traced step's ops: the step's loss and
// the last validation (val_step -1: none).
struct trace_losses {
  double loss = 0;
  int64_t val_step = -1;  // steps trained before the validation
  double val_loss = 0;
};

// start_ns/end_ns: per rank, per op, from the start of the step. The losses
// go into otherData and, as counters, beside rank 0's ops.
std::string trace_json(const program& p, int64_t step,
                       const std::vector<std::vector<int64_t>>& start_ns,
                       const std::vector<std::vector<int64_t>>& end_ns,
                       const trace_losses& losses = {});

// Fraction of collective time (all-gather, reduce-scatter, all-reduce) that
// overlapped with compute on the same rank, over all ranks: 1 = fully hidden;
// negative when the step has no collectives.
double trace_hidden_comm_fraction(const program& p,
                                  const std::vector<std::vector<int64_t>>& start_ns,
                                  const std::vector<std::vector<int64_t>>& end_ns);
