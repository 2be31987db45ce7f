// Accuracy: the measured error of each kind of figures. The ratios are
// copied from the files named in `where`, which hold the runs; the test
// tools_results_consistent (tools/check_results.py) fails when a ratio
// here and the newest runs there disagree.
#include "codegen/planner/Accuracy.h"

#include <fmt/format.h>

namespace fsdpgen {
namespace {

// h100-sxm's built-in figures against fsdpgen's own steps: step ms measured
// / predicted 128.4 / 86.1, 322.6 / 242.9, 356.0 / 273.9 (11:05 entry) and
// 129.9 / 86.1 (13:50 entry).
const MeasuredError kH100BuiltIn = {1.30, 1.51,
                                    "GPT-2 124M, 350M and 1.5B at world 1 on one H100 80GB, "
                                    "cuDNN attention",
                                    "2026-11-26", "tests/bench/cuda/RESULTS.md"};

// A profile calibrated on that H100: 129.9 / 120.3 for the step, 129.0 /
// 120.3 for the traced step (13:50 entry).
const MeasuredError kCudaCalibrated = {1.07, 1.08, "GPT-2 124M at world 1 on one H100 80GB",
                                       "2026-11-26", "tests/bench/cuda/RESULTS.md"};

// The 2-core VM's figures against fsdpgen's own steps there, built-in and
// calibrated, from the same runs: the medians over repetitions of each
// configuration (the newest entry's sentences).
const MeasuredError kCpuRuns = {0, 0,
                                "tiny and small-10m at 1 and 2 ranks on a 2-core VM, the median "
                                "of 3 repetitions each",
                                "2026-11-28", "tests/bench/RESULTS.md"};
const MeasuredError kCpuBuiltIn = {0.39, 0.69, kCpuRuns.runs, kCpuRuns.date, kCpuRuns.where};
const MeasuredError kCpuCalibrated = {0.87, 1.08, kCpuRuns.runs, kCpuRuns.date, kCpuRuns.where};

// The CPU figures across hosts: tests/slurm/hosts.fsdp at world 4 over 2
// hosts of the namespace cluster (tests/bench/multihost/RESULTS.md), links
// of 100 Mbit/s and unshaped, full_shard and hybrid_shard: measured /
// predicted 75.8 / 43.6, 24.0 / 3.2, 36.3 / 18.8, 20.8 / 3.9 calibrated
// (--nodes 2) and 75.8 / 7.3, 24.0 / 7.0, 36.3 / 7.3, 20.8 / 7.0 built-in.
// The two hosts share one machine's 2 cores, so compute is underpredicted.
const MeasuredError kCpuHostsRuns = {0, 0,
                                     "a world-4 GPT-2 over 2 hosts of a namespace cluster on one "
                                     "2-core VM, whose ranks share its cores, full_shard and "
                                     "hybrid_shard, links of 100 Mbit/s and unshaped",
                                     "2026-11-28", "tests/bench/multihost/RESULTS.md"};
const MeasuredError kCpuCalibratedHosts = {1.74, 7.50, kCpuHostsRuns.runs, kCpuHostsRuns.date,
                                           kCpuHostsRuns.where};
const MeasuredError kCpuBuiltInHosts = {2.97, 10.38, kCpuHostsRuns.runs, kCpuHostsRuns.date,
                                        kCpuHostsRuns.where};

// The A100 descriptions against published runs this project did not make
// (the reported TFLOPS per GPU against the predicted model TFLOPS):
// GPT-175B on the FSDP paper's cluster 186.0 / 173 and 186.8 / 186;
// GPT-1T on AWS p4d 159.0 / 84 and 161.6 / 81.
const MeasuredError kPaperCluster = {1.00, 1.08,
                                     "GPT-175B at 128 to 512 GPUs, as the FSDP paper (Zhao et "
                                     "al. 2023) reports it, model-FLOPs reading",
                                     "2026-11-24", "tests/paper/README.md"};
const MeasuredError kGpt1tBlog = {1.89, 2.00,
                                  "GPT-1T offloaded at 128 and 512 GPUs, as the FSDP 1T blog "
                                  "(Belevich et al. 2022) reports it",
                                  "2026-11-24", "tests/paper/README.md"};

// "a measured step took 1.30-1.51x the predicted time (runs, date, file)".
std::string measured_sentence(const MeasuredError& e) {
  return fmt::format("a measured step took {} the predicted time ({}, {}, {})", ratio_range(e),
                     e.runs, e.date, e.where);
}

std::string calibrate_hint(const Hardware& hw) {
  const MeasuredError& e = hw.gpu ? kCudaCalibrated : kCpuCalibrated;
  return fmt::format("; with a profile `fsdpgen calibrate{}` measured there, {} ({})",
                     hw.gpu ? " --target cuda" : "", ratio_range(e), e.date);
}

Accuracy built_in(const Hardware& hw) {
  const std::string figures = fmt::format("the built-in '{}' figures", hw.name);
  if (hw.name == "h100-sxm")
    return {kH100BuiltIn,
            fmt::format("{}: {}{}", figures, measured_sentence(kH100BuiltIn), calibrate_hint(hw))};
  if (hw.name == "h200")
    return {kH100BuiltIn,
            fmt::format("{} were never run on an H200; they are built like h100-sxm's (the same "
                        "peaks), with which {}: the range expected here is the H100's{}",
                        figures, measured_sentence(kH100BuiltIn), calibrate_hint(hw))};
  if (hw.name == "cpu")
    return {kCpuBuiltIn, fmt::format("{} (estimates meant to err slow): {}{}", figures,
                                     measured_sentence(kCpuBuiltIn), calibrate_hint(hw))};
  for (const auto& [name, published] :
       {std::pair{"a100-80g-roce", &kPaperCluster}, std::pair{"a100-40g", &kGpt1tBlog}})
    if (hw.name == name)
      return {std::nullopt,
              fmt::format("{} were never run against a step of this project's; set against "
                          "published results instead, {}",
                          figures, measured_sentence(*published))};
  return {std::nullopt,
          fmt::format("{} were never measured against a real step (datasheets and estimates); "
                      "with such figures for an H100 {}",
                      figures, measured_sentence(kH100BuiltIn))};
}

Accuracy calibrated(const Hardware& hw) {
  const MeasuredError& e = hw.gpu ? kCudaCalibrated : kCpuCalibrated;
  return {e, fmt::format("with profiles calibrated on {} {}", hw.gpu ? "a GPU" : "a CPU",
                         measured_sentence(e))};
}

}  // namespace

std::string ratio_range(const MeasuredError& e) {
  const std::string low = fmt::format("{:.2f}", e.low), high = fmt::format("{:.2f}", e.high);
  return low == high ? low + "x" : fmt::format("{}-{}x", low, high);
}

Accuracy prediction_accuracy(const Hardware& hw, int64_t world, int64_t nodes) {
  Accuracy a = hw.profile ? calibrated(hw) : built_in(hw);
  if (!hw.gpu && nodes > 1) {
    // The single-host range does not hold across hosts: the measured one replaces it.
    const MeasuredError& e = hw.profile ? kCpuCalibratedHosts : kCpuBuiltInHosts;
    a.expected = e;
    a.text += fmt::format(
        "; across hosts, {}: no real multi-node cluster has been measured, and there the "
        "compute (underpredicted here on shared cores) would weigh less",
        measured_sentence(e));
  }
  if (hw.gpu && world > 1)
    a.text +=
        "; communication between GPUs (NVLink, the network) is priced from datasheets and "
        "others' measurements: this project has never measured it (its GPU machines had one GPU)";
  return a;
}

}  // namespace fsdpgen
