// StepShape: what the schedule builder (codegen/planner/ScheduleBuilder.h)
// knows of the step before it issues anything, fixed for the whole build:
// the groups (shard, replica, micro-batches), the strategy's switches, the
// dtypes' bytes, the activation shape, the Muon plan, and the questions the
// phases ask of units and segments.
#pragma once

#include <cstdint>
#include <vector>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Schedule.h"

namespace fsdpgen::schedule_builder {

struct StepShape {
  // Precondition: `units` outlives the shape (build_schedule's argument).
  StepShape(const Units& units, const ScheduleOptions& options);

  const Units& lowered;
  const Spec& spec;
  const ParallelSpec& p;
  ScheduleOptions options;
  int64_t S = 1, R = 1, M = 1;  // shard group, replicas, micro-batches
  bool sharded = false, replicated = false, offload = false, free_after_forward = true,
       recompute = false, offload_acts = false;
  bool muon = false;  // optimizer = muon(...)
  int64_t pbytes = 4, rbytes = 4, mbytes = 4,
          gbytes = 4;  // param, unsharded grad, master, grad shard
  ActivationShape act;
  MuonPlan muon_plan;  // muon: every unit's matrices and owners; else empty

  const std::vector<FlatUnit>& units() const { return lowered.units; }
  const std::vector<Segment>& segments() const { return lowered.segments; }
  int64_t unit_bytes(int u, int64_t elem_bytes) const {
    return units()[u].padded_elems * elem_bytes;
  }
  int64_t shard_bytes(int u, int64_t elem_bytes) const {
    return units()[u].shard_elems * elem_bytes;
  }
  bool has_params(int u) const { return units()[u].padded_elems > 0; }
  bool has_muon(int u) const { return muon && !muon_plan.matrices[u].empty(); }
  // Shard-sized optimizer state buffers per unit: AdamW's m and v (muon: its
  // nested AdamW's), SGD's momentum.
  int64_t optimizer_states() const;
  // Params must be brought in before compute: gathered, or copied from the host.
  bool needs_gather(int u) const { return has_params(u) && (sharded || offload); }

  // What group g (Segment::group) saves: all its layers' slots, or under
  // recompute = block only its first layer's input.
  bool recomputes(int seg) const { return recompute && segments()[seg].unit != 0; }
  int64_t saved_bytes(int g) const;
  bool last_of_group(int i) const {
    return i + 1 == static_cast<int>(segments().size()) ||
           segments()[i + 1].group != segments()[i].group;
  }
  // A recompute of segment i rebuilds something: not when it is only its
  // block's last piece, whose forward writes just the block's output.
  bool recompute_rebuilds(int i) const;
  // Whether segment i is its unit's last in forward order, or its first.
  bool last_forward_segment(int i) const;
  bool first_forward_segment(int i) const;
};

}  // namespace fsdpgen::schedule_builder
