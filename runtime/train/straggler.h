// straggler: which rank held the others up in a step, and in which op kind
// (--straggler-every N). Each rank's op times of the step, summed per op
// kind, are gathered on rank 0, which sets the slowest rank against the
// median rank.
//
// "Slowest" is by busy time, not by the step's wall time: the collectives
// make every rank wait for the last one, so all ranks end a step at about the
// same moment and a rank's collectives last as long as it waited. A rank's
// busy time is what its own work took: every op but the collectives (and the
// frees). The straggler is the rank with the most of it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/program.h"

// One rank's step, as its ops measured it.
struct straggler_times {
  int64_t step_ns = 0;                 // its first op's start to its last op's end
  int64_t kind_ns[kOpKindCount] = {};  // per op kind, its ops' durations summed
};

// start_ns/end_ns: per op, from the start of the step (the backend's
// op_start_ns/op_end_ns after a timed step).
straggler_times straggler_times_of(const program& p, const std::vector<int64_t>& start_ns,
                                   const std::vector<int64_t>& end_ns);

// Every op kind's time but the collectives' and the frees'.
int64_t straggler_busy_ns(const straggler_times& t);

struct straggler_report {
  int64_t rank = -1;         // the busiest rank (the lowest such rank on a tie)
  int64_t median_rank = -1;  // the rank whose busy time is the median (the lower one of two)
  double busy_s = 0, median_busy_s = 0;
  double step_s = 0;  // the busiest rank's step, its waits included
  // The kind of its own work (not a collective) in which the busiest rank
  // lost most against the median rank, and how much longer its ops of that
  // kind took.
  op_kind kind = op_kind::forward;
  double lost_s = 0;
};

// The straggler among `ranks` (index: rank; at least two).
straggler_report straggler_find(const std::vector<straggler_times>& ranks);

// Worth a log line: the busiest rank took more than 10% longer than the median rank.
bool straggler_notable(const straggler_report& r);

// The gather's buffers, allocated once at set-up so that a measured step
// allocates nothing.
class straggler_gather {
 public:
  straggler_gather(int64_t world, bool lead);
  // Collective over MPI_COMM_WORLD, after a timed step: rank 0 returns the
  // report, the other ranks nothing.
  std::optional<straggler_report> measure(const program& p, const std::vector<int64_t>& start_ns,
                                          const std::vector<int64_t>& end_ns);

 private:
  bool lead_;
  std::vector<straggler_times> all_;  // rank 0: one per rank
};
