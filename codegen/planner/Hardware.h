// Hardware: the descriptions the cost model (Cost.h) turns a schedule into
// time with: peak FLOP rates per dtype, a compute-efficiency curve, memory
// capacity and bandwidth, the links collectives and copies use, and fixed
// per-op costs. Plain values, looked up by name; the figures and their
// sources are in Hardware.cpp. Rates are per device (one rank), in SI units.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/Spec.h"

namespace fsdpgen {

namespace profile {
struct Profile;  // runtime/profile/profile.h
}

// A link class that collectives run over, described the way nccl-tests and
// NCCL's own tuning model (src/graph/tuning.cc) describe it.
struct Link {
  // Achievable bus bandwidth (nccl-tests "busbw"): a ring collective of
  // payload S over n ranks moves S*(n-1)/n bytes per rank at this rate.
  double busbw_bytes_per_s = 0;
  // Latency of one ring step (one hop) over this link.
  double hop_latency_s = 0;
};

struct Hardware {
  std::string name;         // lookup name, e.g. "a100-80g"
  bool gpu = true;          // false: the CPU backend (no CUDA context, materialized attention)
  std::string description;  // one line: the part and the node it sits in

  // Dense (no sparsity) peak rates of the matrix units, FLOP/s.
  double peak_bf16_flops = 0;
  double peak_fp16_flops = 0;
  double peak_fp32_flops = 0;  // IEEE fp32 (no TF32): what an fp32 spec computes in

  // Compute efficiency of a matrix multiply of f FLOPs:
  //   eff(f) = gemm_max_efficiency * f / (f + gemm_half_flops)
  // gemm_max_efficiency is the fraction of peak a transformer segment's
  // kernels reach at large sizes (large GEMMs, with the element-wise kernels
  // between them folded in); gemm_half_flops is the size at which a single
  // GEMM reaches half of that (fixed per-kernel costs: launch, tails).
  double gemm_max_efficiency = 0;
  double gemm_half_flops = 0;

  int64_t memory_bytes = 0;       // device memory capacity
  double memory_bytes_per_s = 0;  // achievable device memory bandwidth (memory-bound ops)
  Link intra_node;                // ranks of one node (NVLink, or shared memory on a CPU)
  Link inter_node;  // across nodes: busbw of a ring whose every node has ranks_per_node members
  double collective_base_latency_s = 0;  // fixed cost of one collective call
  double host_link_bytes_per_s = 0;      // host <-> device copies (offload), per direction
  int64_t host_memory_bytes = 0;  // this rank's share of its node's RAM (offload's host arena);
                                  // a CPU's "device" memory is the same RAM
  double host_memory_bytes_per_s =
      0;                         // this rank's share of host memory bandwidth (host optimizer)
  double launch_overhead_s = 0;  // fixed cost of every compute, memory-bound or copy op

  // Where the figures above come from, group by group, as print_hardware
  // shows them: "datasheet", "estimate", or whose measurement.
  struct Sources {
    std::string peak, efficiency, memory, intra_node, inter_node, fixed, host;
  } sources;

  // What `fsdpgen calibrate` measured on this machine (codegen/planner/Calibrated.h),
  // read from profile_path: when set, the cost model takes each op's time
  // from it and the figures above only for what it did not measure.
  std::shared_ptr<const profile::Profile> profile;
  std::string profile_path;

  // Dense peak for computing in `d`.
  double peak_flops(DType d) const;
  // eff(f) above, in [0, gemm_max_efficiency).
  double gemm_efficiency(double flops) const;
};

// Every known description, in a fixed order (by name).
const std::vector<Hardware>& known_hardware();
std::vector<std::string_view> hardware_names();

// The description called `name` (in any case: H100-SXM is h100-sxm), or nullopt.
std::optional<Hardware> find_hardware(std::string_view name);
// The message for a name find_hardware() does not know, naming the closest
// known names and listing them all:
//   unknown hardware 'a100'; did you mean 'a100-40g' or 'a100-80g'? known: 'a100-40g', ...
std::string unknown_hardware_error(std::string_view name);

// A one-screen description of `h` with its figures, for `fsdpgen plan` and logs.
std::string print_hardware(const Hardware& h);

}  // namespace fsdpgen
