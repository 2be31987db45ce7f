// paper_compare: one configuration of a spec through the planner and the
// cost model, printed as one line of figures for tests/paper/compare.sh:
//   paper_compare SPEC GPU WORLD MICRO_BATCH [--inter-busbw GB/s]
// prints: step_s model_tflops hardware_tflops mfu exposed_comm_pct memory_gib capacity_gib
// --inter-busbw replaces the hardware's inter-node bus bandwidth (a what-if
// for clusters whose network differs from the description's).
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "codegen/Cost.h"
#include "codegen/Hardware.h"
#include "codegen/Pipeline.h"

namespace {

int usage() {
  std::fputs("usage: paper_compare SPEC GPU WORLD MICRO_BATCH [--inter-busbw GB/s]\n", stderr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fsdpgen;
  if (argc != 5 && argc != 7) return usage();
  std::optional<Hardware> hw = find_hardware(argv[2]);
  if (!hw) {
    std::fputs(fmt::format("paper_compare: error: {}\n", unknown_hardware_error(argv[2])).c_str(),
               stderr);
    return 2;
  }
  PipelineOptions options;
  try {
    options.overrides.world = std::stoll(argv[3]);
    options.overrides.micro_batch = std::stoll(argv[4]);
    if (argc == 7) {
      if (std::string(argv[5]) != "--inter-busbw") return usage();
      hw->inter_node.busbw_bytes_per_s = std::stod(argv[6]) * 1e9;
    }
  } catch (const std::exception&) {
    return usage();
  }
  Pipeline p = run_pipeline(argv[1], options);
  std::fputs(p.diagnostics.c_str(), stderr);
  if (!p.spec) return 1;
  const Timeline t = predict(*p.schedule, *hw);
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  std::fputs(
      fmt::format("{:.2f} {:.1f} {:.1f} {:.3f} {:.1f} {:.1f} {:.1f}\n", t.step_ms / 1e3,
                  t.model_tflops, t.hardware_tflops, t.mfu, 100 * t.exposed_comm_ms / t.step_ms,
                  static_cast<double>(p.memory->device_arena_bytes) / kGiB,
                  static_cast<double>(hw->memory_bytes) / kGiB)
          .c_str(),
      stdout);
  return 0;
}
