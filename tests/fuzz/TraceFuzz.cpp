// libFuzzer target for the traces `fsdpgen compare` reads: the input as a
// trace (read_step_trace), then compared with its first rank as the
// prediction and merged into one Perfetto trace. A bad trace must be a
// CompareError; one that reads must hold ops 0..n-1 per rank with finite
// start times and end times not before them, and its merged trace must be
// JSON, else we abort.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "codegen/planner/Compare.h"
#include "tests/fuzz/Fuzz.h"

namespace {

using fuzz::check;

void check_trace(const fsdpgen::StepTrace& t) {
  check(!t.ranks.empty(), "a trace holds ops");
  for (const auto& ops : t.ranks)
    for (size_t i = 0; i < ops.size(); ++i) {
      check(ops[i].id == static_cast<int>(i), "a rank's ops are 0..n-1 in order");
      check(std::isfinite(ops[i].start_ms), "an op starts at a finite time");
      check(ops[i].end_ms >= ops[i].start_ms, "an op ends no earlier than it starts");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fsdpgen::StepTrace measured;
  try {
    measured = fsdpgen::read_step_trace(text, "fuzz.json");
  } catch (const fsdpgen::CompareError&) {
    return 0;
  }
  check_trace(measured);
  fsdpgen::StepTrace predicted = measured;
  predicted.ranks.resize(1);
  const int last = static_cast<int>(measured.ranks.size()) - 1;
  for (int rank : {0, last}) {
    try {
      fsdpgen::compare_report(predicted, measured, {rank, 3});
    } catch (const fsdpgen::CompareError&) {
      continue;
    }
    const std::string merged = fsdpgen::merged_trace(predicted, measured, rank);
    check(nlohmann::json::accept(merged), "the merged trace is JSON");
  }
  return 0;
}
