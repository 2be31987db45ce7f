// Accuracy: how far the cost model's predictions were measured from real
// steps, for each kind of figures a prediction can come from (a built-in
// hardware description by name, or a profile `fsdpgen calibrate` measured,
// by backend): the range, what ran, when, and the file that holds the runs.
// Every printed prediction (plan, tune, the predicted trace) carries it, so
// that a step time or an MFU says what it is worth.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "codegen/planner/Hardware.h"

namespace fsdpgen {

// One set of comparisons: measured step / predicted step over its runs.
struct MeasuredError {
  double low = 0;     // the smallest ratio seen
  double high = 0;    // the largest
  std::string runs;   // what ran: "GPT-2 124M, 350M and 1.5B at world 1 on one H100 80GB"
  std::string date;   // "2026-11-26"
  std::string where;  // the file holding the runs: "tests/bench/cuda/RESULTS.md"
};

struct Accuracy {
  // The range a real step is expected in, as a multiple of the prediction:
  // set where this kind of figures was measured (or shares its measured
  // figures with hardware that was); absent where it never was.
  std::optional<MeasuredError> expected;
  // Sentences for the reader: where the figures were measured against real
  // steps and how far off they were, or that they never were; and, for
  // several GPUs, that the links between them were never measured.
  std::string text;
};

// The accuracy of a prediction made with `hw` (built-in, or calibrated when
// hw.profile is set) for a job of `world` ranks over `nodes` nodes (world /
// ranks_per_node; more than one: links between hosts in the step).
Accuracy prediction_accuracy(const Hardware& hw, int64_t world, int64_t nodes);

// "1.30-1.51x" (or "1.08x" when low and high round alike).
std::string ratio_range(const MeasuredError& e);

}  // namespace fsdpgen
