// Calibrated: a schedule's work in the terms of a hardware profile
// (runtime/profile/profile.h): the layer passes, element-wise ops, collectives and
// copies each op runs, looked up in what `fsdpgen calibrate` measured (and
// interpolated where only the size differs), and the request that asks the
// calibration binary to measure exactly those.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/planner/Hardware.h"
#include "codegen/planner/Schedule.h"
#include "runtime/profile/profile.h"

namespace fsdpgen {

// The layer passes a compute op (F, RECOMPUTE, B) runs, in order, as profile
// keys (times zero): one per embedding, block and final-norm-and-head of its
// segment, at the plan's micro-batch. Other ops run none. A piece of a block
// (sub-block units) is the block's pass with `share` its part of the block's
// FLOPs (a norm's share is 0: its time is in the op's overhead).
struct OpLayerPass {
  profile::LayerTime key;
  double share = 1;
};
std::vector<OpLayerPass> op_layer_passes(const Schedule& s, const Op& op);

// The element-wise work of an OPT or GRADNORM op, as profile keys.
std::vector<profile::ElementwiseTime> op_elementwise(const Schedule& s, const Op& op);

// The Newton-Schulz work of a MUON_NS op (OpKind::MuonOrthogonalize), as
// profile keys: each matrix of its unit with its owner in the shard group
// (codegen/planner/Muon.h's plan), at the optimizer's ns_steps and ns_dtype.
// The op takes as long as its slowest owner's matrices together.
struct OpMuonMatrix {
  int64_t owner = 0;
  profile::MuonNsTime key;
};
std::vector<OpMuonMatrix> op_muon_ns(const Schedule& s, const Op& op);

// How a duration was found.
enum class Lookup {
  Measured,      // this very shape and size was measured
  Interpolated,  // the same shape at other sizes (micro-batch, bytes, elements) was measured
  Scaled,        // only other shapes were: the nearest one, scaled by the FLOPs
  Missing,       // nothing comparable: the caller falls back to the built-in figures
};

// How fast a collective and the compute go while both run on a rank, each as
// a fraction of its speed alone (the profile's contention entries: a CPU
// rank's comm thread and compute thread share its cores).
struct Contention {
  double compute_speed = 1;
  double comm_speed = 1;
};

struct Looked {
  double seconds = 0;
  Lookup how = Lookup::Missing;
  double latency_s = 0;  // collectives: the part that does not grow with the size
};

// Durations from `profile` for plans that run `ranks_per_node` ranks on a
// node: from the compute section measured with that many ranks computing at
// once, else the closest one (placement_exact() says which).
class CalibratedTimes {
 public:
  CalibratedTimes(const profile::Profile& profile, int64_t ranks_per_node);

  const profile::Compute& compute() const { return *compute_; }
  bool placement_exact() const { return exact_; }

  Looked layer(const profile::LayerTime& key) const;
  Looked elementwise(const profile::ElementwiseTime& key) const;
  // The same (rows, cols) at its ns_steps and ns_dtype, Measured; else the
  // nearest measured shape in Newton-Schulz FLOPs (same ns_dtype, ns_steps
  // above 0), Scaled by the FLOPs.
  Looked muon_ns(const profile::MuonNsTime& key) const;
  // op is the profile's name ("all_gather", ...); bytes the schedule's payload.
  Looked collective(std::string_view op, DType dtype, int64_t ranks, int64_t nodes,
                    int64_t bytes) const;
  Looked copy(std::string_view op, int64_t bytes) const;
  // Collective `op` ("all_gather", ...) over `ranks` ranks of one node beside
  // a layer pass: the contention entry of that op and ranks, each side's time
  // alone (the profile's entry of the same key) over its time beside the
  // other, at most 1; {1, 1} when the profile has none (GPU profiles).
  Contention contention(std::string_view op, int64_t ranks) const;

 private:
  const profile::Profile& profile_;
  const profile::Compute* compute_ = nullptr;
  bool exact_ = false;
};

// The hardware `profile` (read from `path`) describes: its base's figures
// (profile::Device::base) for what it does not measure, its device's memory,
// and the profile itself for the cost model. Throws profile::ProfileError
// when the base is no known hardware.
Hardware calibrated_hardware(profile::Profile profile, const std::string& path);

// A profile at `path`, or a built-in hardware name: what --hardware names.
// Throws profile::ProfileError (a file) or std::invalid_argument (a name).
Hardware hardware_named(const std::string& name_or_path);

// The dtype a collective moves: all-gathers the params', reductions the
// gradients' (the norm's scalar all-reduce is fp32); Muon's gathers the
// gradient shards', its scatters the fp32 updates.
DType collective_dtype(const Schedule& s, const Op& op);

// The profile name of a collective or copy op kind ("all_gather", "h2d";
// Muon's point-to-point exchanges, MUON_GATHER and MUON_SCATTER, are
// "send_recv": the busiest rank's payload after one hop).
std::string_view profile_op_name(OpKind k);

// The request `fsdpgen calibrate` hands the calibration binary for
// `schedules` (plans of one target): every layer pass, element-wise op and
// Muon matrix shape they run, in compute sections for 1 and `ranks_per_node` ranks per node;
// every collective (Muon's exchanges as send_recv) whose group fits on the calibration's `nodes`
// nodes of `ranks_per_node` ranks (one node: at most `ranks_per_node` ranks), each entry with
// the nodes its group spans in the plan (a hybrid replica group: one rank on each of 2 nodes);
// every copy; and, so that other plans interpolate, a sweep of sizes for each collective group
// and copy direction. Each entry once, in first-use order. device.base is `base`. On a CPU,
// a contention entry for each collective op whose group is `ranks_per_node` ranks of one node:
// its plans' largest payload beside their first block backward pass (else their first layer pass).
profile::Profile calibration_request(const std::vector<Schedule>& schedules, const Hardware& base,
                                     int64_t ranks_per_node, const std::string& sweep,
                                     int64_t nodes = 1);

}  // namespace fsdpgen
