// paper_compare: `fsdpgen plan` for one configuration with the hardware's
// inter-node bus bandwidth replaced, a what-if for clusters whose network
// differs from the description's (tests/paper/compare.sh):
//   paper_compare SPEC GPU WORLD MICRO_BATCH INTER_BUSBW_GB_PER_S
// Prints the lines of `fsdpgen plan` that compare.sh reads: the fit line and
// the predicted timeline, planned exactly as `plan` does (make_plan).
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "codegen/planner/Cost.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Planner.h"
#include "dsl/Frontend.h"

namespace {

int usage() {
  std::fputs("usage: paper_compare SPEC GPU WORLD MICRO_BATCH INTER_BUSBW_GB_PER_S\n", stderr);
  return 2;
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1LL << 30));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fsdpgen;
  if (argc != 6) return usage();
  std::optional<Hardware> hw = find_hardware(argv[2]);
  if (!hw) {
    std::fputs(fmt::format("paper_compare: error: {}\n", unknown_hardware_error(argv[2])).c_str(),
               stderr);
    return 2;
  }
  SpecOverrides overrides;
  try {
    overrides.world = std::stoll(argv[3]);
    overrides.micro_batch = std::stoll(argv[4]);
    hw->inter_node.busbw_bytes_per_s = std::stod(argv[5]) * 1e9;
  } catch (const std::exception&) {
    return usage();
  }
  FrontendResult r = load_spec_file(argv[1], overrides);
  std::fputs(r.diagnostics.c_str(), stderr);
  if (!r.spec) return 1;
  const Plan plan = make_plan(*r.spec, *hw);
  std::fputs(fmt::format("fits: {}: peak {} of {} usable\n", plan.fits ? "yes" : "NO",
                         gib(plan.memory->device_arena_bytes), gib(usable_bytes(*hw)))
                 .c_str(),
             stdout);
  std::fputs(print_timeline(*plan.schedule, *plan.timeline).c_str(), stdout);
  return 0;
}
