// Cost: Schedule x Hardware -> Timeline, the predicted start and end of
// every op of one step (DESIGN §6). Each stream runs its ops in issue order;
// an op starts when the op before it on its stream and all its deps have
// finished. Durations (launch = per-op overhead, n = group size):
//   F, RECOMPUTE, B  launch + flops / (peak[param dtype] * eff(flops per GEMM))
//                    + memory_bytes / memory bandwidth
//   GRADNORM, OPT    launch + flops / peak[fp32] + memory_bytes / memory bandwidth
//                    (host memory bandwidth on the host stream)
//   AG, RS           base + hops + payload * (n-1)/n / busbw   (ring: Thakur et al., 2005)
//   AR               base + 2 * (hops + payload * (n-1)/n / busbw)
//   H2D, D2H         launch + bytes / host link bandwidth
//   FREE             0
// where hops = (n-1 - (nodes-1)) * intra-node hop latency + (nodes-1) *
// inter-node hop latency (NCCL's ring model), and a group spanning nodes
// gets the inter-node busbw scaled by its share of each node's ranks (its
// members on a node share the node's NICs with the other groups). Transfers
// over the same link class at the same time split its bandwidth. With a CPU
// profile's contention entries, a collective and the compute ops running at
// the same time each go at the measured fraction of their speed alone (the
// rank's comm thread and compute thread share its cores).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/planner/Accuracy.h"
#include "codegen/planner/GroupPlacement.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Schedule.h"

namespace fsdpgen {

struct OpTime {
  double start_ms = 0;
  double end_ms = 0;
  double ms() const { return end_ms - start_ms; }
};

struct Timeline {
  std::string hardware;       // Hardware::name
  DType dtype = DType::FP32;  // the param dtype compute ran in
  double peak_tflops = 0;     // the hardware's dense peak for that dtype
  std::vector<OpTime> ops;    // indexed like Schedule::ops
  double step_ms = 0;         // end of the last op (the step starts at 0)
  // The validation pass (codegen/planner/Validation.h) run alone: the end of its last
  // op (its ops come first on their streams, so nothing outside delays them).
  double validation_pass_ms = 0;

  // Busy time: the measure of the union of the ops' intervals. Compute ops
  // are F, RECOMPUTE, B, GRADNORM and OPT; communication ops AG, RS, AR, H2D
  // and D2H.
  double compute_ms = 0;
  double comm_ms = 0;
  // The time in which at least one communication op runs and no compute op
  // does: communication the schedule failed to hide.
  double exposed_comm_ms = 0;
  std::vector<double> stream_busy_ms;  // per StreamId

  // Throughput. Tokens are global: world * micro_batch * micro_batches * context.
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  // Model FLOPs per rank per step: model_flops_per_token() (Flops.h:
  // 6 * matmul parameters + 12 * L * T * C per token) times the rank's
  // tokens. Hardware FLOPs: the sum of the ops' FLOPs (recompute included).
  double model_flops_per_rank = 0;
  double hardware_flops_per_rank = 0;
  double model_tflops = 0;     // per GPU
  double hardware_tflops = 0;  // per GPU
  double mfu = 0;              // model_tflops / peak_tflops
  double hfu = 0;              // hardware_tflops / peak_tflops

  int64_t comm_bytes = 0;  // bytes each rank sends in collectives per step (ring: Op::sent_bytes)
  int64_t copy_bytes = 0;  // host <-> device bytes per rank per step

  // Where the durations came from: the built-in figures, or a profile
  // (Hardware::profile) and how each op's time was found in it
  // (codegen/planner/Calibrated.h's Lookup; an op counts by its least direct part).
  std::string source;
  int ops_measured = 0, ops_interpolated = 0, ops_scaled = 0, ops_estimated = 0;
  // How far such figures were measured from real steps (Accuracy.h).
  Accuracy accuracy;
};

struct CostOptions {
  // Concurrent transfers over one link class share its bandwidth. Off: each
  // runs at the full rate, as if alone (for debugging and for comparing).
  bool share_links = true;
  // A collective and compute at once go at the profile's measured fractions
  // of their speed alone (CPU profiles' contention entries). Off: each as
  // if alone (for comparing).
  bool contention = true;
};

// Precondition: `s` came from build_schedule() or is equally well formed
// (op ids are positions, deps name existing ops, no cycles). Throws
// std::invalid_argument when `hw` lacks a figure the schedule needs. With
// hw.profile, each op's time alone is what the profile measured (the
// schedule's layer passes, element-wise ops, collectives and copies, plus the
// measured per-op overhead); ops it has nothing comparable for take the
// formulas above.
Timeline predict(const Schedule& s, const Hardware& hw, const CostOptions& options = {});

// Seconds one op takes on `hw` when it runs alone (no link shared).
double op_seconds(const Schedule& s, const Op& op, const Hardware& hw);

// A short text summary: step time, throughput, TFLOPS, MFU, communication.
std::string print_timeline(const Schedule& s, const Timeline& t);
// One line: the figures the prediction used ("hardware profile p.json (...):
// 40 ops measured, 3 interpolated" or "built-in figures for 'cpu' ...").
std::string timeline_source(const Timeline& t);
// The timeline as a Chrome/Perfetto trace (JSON object format): one track
// per stream, a complete event per op (ts and dur in microseconds), the op's
// id, unit, micro-batch, bytes, FLOPs and deps in its args.
std::string trace_json(const Schedule& s, const Timeline& t);

}  // namespace fsdpgen
