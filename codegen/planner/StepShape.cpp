// StepShape: the step's fixed facts, derived once from the spec.
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

StepShape::StepShape(const Units& units, const ScheduleOptions& o)
    : lowered(units), spec(units.spec), p(units.spec.parallel), options(o) {
  S = p.shard_group;
  R = p.replicas();
  M = p.accumulate.micro_batches;
  sharded = S > 1;
  replicated = R > 1;
  offload = p.offload == Offload::Cpu;
  free_after_forward = !keeps_params_through_backward(p.sharding);
  recompute = p.recompute == Recompute::Block;
  offload_acts = recompute && p.offload_activations;
  pbytes = dtype_bytes(p.precision.param);
  rbytes = dtype_bytes(unsharded_grad_dtype(p));
  mbytes = dtype_bytes(p.precision.master);
  gbytes = dtype_bytes(grad_shard_dtype(p));
  act = {spec.train.micro_batch * spec.model.context, pbytes, o.flash_attention};
  muon = spec.train.optimizer.kind == OptimizerKind::Muon;
  if (muon) muon_plan = plan_muon(units, spec.train.optimizer.ns_steps);
}

int64_t StepShape::optimizer_states() const {
  const OptimizerSpec& o = spec.train.optimizer;
  return o.kind != OptimizerKind::Sgd ? 2 : (o.momentum > 0 ? 1 : 0);
}

int64_t StepShape::saved_bytes(int g) const {
  if (recomputes(g)) return segment_input_bytes(spec.model, act);
  return group_saved_bytes(lowered, g, act);
}

bool StepShape::recompute_rebuilds(int i) const {
  const Segment& seg = segments()[i];
  const LayerId& l = seg.layers.front();
  return !(last_of_group(i) && seg.layers.size() == 1 && writes_only_block_output(spec.model, l));
}

bool StepShape::last_forward_segment(int i) const {
  for (size_t k = i + 1; k < segments().size(); ++k)
    if (segments()[k].unit == segments()[i].unit) return false;
  return true;
}

bool StepShape::first_forward_segment(int i) const {
  for (int k = 0; k < i; ++k)
    if (segments()[k].unit == segments()[i].unit) return false;
  return true;
}

}  // namespace fsdpgen::schedule_builder
