// Compare: a predicted step (`fsdpgen schedule --format trace`) against a
// measured one (`./train --trace`), op by op: step totals, exposed
// communication, busy time per stream, time per op kind and the ops whose
// times differ most; and one Perfetto trace holding both, each stream's
// predicted track above its measured one. `fsdpgen compare` prints it. The
// same tables set two ranks of one measured trace side by side.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen {

// A bad or mismatched trace; the message names the file or the difference.
struct CompareError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TraceOp {
  int id = 0;
  std::string label;   // "AG u3 mb0"
  std::string kind;    // "AG", "F", ...
  std::string stream;  // the track's name: "compute", "allgather", ...
  int64_t unit = -1, micro_batch = -1, group_size = 1, payload_bytes = 0;
  double start_ms = 0, end_ms = 0;  // from the step's start
  double ms() const { return end_ms - start_ms; }
};

struct StepTrace {
  std::string file;
  std::string model;                        // otherData's, when the trace says
  int64_t world = 0;                        // otherData's, when the trace says (0: unknown)
  std::string figures;                      // predicted: which figures the cost model used
  std::vector<std::vector<TraceOp>> ranks;  // per process (rank), ops by id
};

// Parses a trace written by fsdpgen (either kind); throws CompareError.
StepTrace read_step_trace(std::string_view text, const std::string& file);

struct CompareOptions {
  int rank = 0;  // the measured rank compared op by op
  int top = 20;  // ops listed, largest difference first (0: all)
};

// Throws CompareError when the traces are not of the same schedule (op
// count, an op's label, kind, unit, micro-batch, group or payload; model or
// world where both say) or the rank does not exist.
std::string compare_report(const StepTrace& predicted, const StepTrace& measured,
                           const CompareOptions& options);

// Two ranks of one measured trace, rank b against rank a, in compare_report's
// tables (`fsdpgen compare TRACE --ranks A,B`; top as CompareOptions').
// Throws CompareError where the trace holds one rank, or a or b is not one
// of its ranks, or they are the same rank.
std::string compare_ranks_report(const StepTrace& measured, int a, int b, int top);

// Both steps as one Chrome/Perfetto trace: per stream, the predicted track
// and the measured rank's beneath it.
std::string merged_trace(const StepTrace& predicted, const StepTrace& measured, int rank);

}  // namespace fsdpgen
