// TuneBounds: lower bounds on a candidate's memory and step
// (codegen/planner/TuneBounds.h).
#include "codegen/planner/TuneBounds.h"

#include <algorithm>
#include <vector>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Cost.h"
#include "codegen/planner/Fit.h"

namespace fsdpgen {

MemoryBound memory_bound(const Units& u, const Spec& spec, const Hardware& hw) {
  const ParallelSpec& p = spec.parallel;
  const bool offload = p.offload == Offload::Cpu;
  const bool gathers = p.shard_group > 1 || offload;
  const int64_t pbytes = dtype_bytes(p.precision.param), mbytes = dtype_bytes(p.precision.master);
  const int64_t rbytes = dtype_bytes(unsharded_grad_dtype(p));
  const OptimizerSpec& opt = spec.train.optimizer;
  // Muon: at least one state an element (the owner's momentum of a matrix,
  // AdamW's m and v elsewhere).
  const int64_t states = opt.kind == OptimizerKind::AdamW  ? 2
                         : opt.kind == OptimizerKind::Muon ? 1
                                                           : (opt.momentum > 0 ? 1 : 0);
  MemoryBound m;
  for (const FlatUnit& f : u.units) {
    if (f.padded_elems == 0) continue;
    int64_t state = f.shard_elems * (pbytes + states * mbytes);
    if (p.precision.master != p.precision.param) state += f.shard_elems * mbytes;
    if (offload)
      m.host += state + f.shard_elems * dtype_bytes(grad_shard_dtype(p));
    else
      m.device += state;
  }
  const ScheduleOptions so = schedule_options_for(hw, spec);
  const ActivationShape act{spec.train.micro_batch * spec.model.context, pbytes,
                            so.flash_attention};
  const bool recompute = p.recompute == Recompute::Block;
  // A segment's backward: its unit gathered, its gradients, the activations
  // a recompute rebuilt for its group, and the gradient of the activations.
  int64_t backward = 0;
  for (const Segment& s : u.segments) {
    const FlatUnit& f = u.units[s.unit];
    int64_t live = f.padded_elems * ((gathers ? pbytes : 0) + rbytes);
    if (recompute) live += group_saved_bytes(u, s.group, act);
    backward = std::max(backward, live);
  }
  backward += backward_scratch_bytes(spec.model, act);
  int64_t workspace = so.gemm_workspace_bytes;
  if (so.cudnn_attention_workspace)
    workspace = std::max(workspace, cudnn_attention_workspace_bytes(spec.model, act));
  m.device += workspace + rope_tables_bytes(spec.model);
  int64_t at_loss = logits_bytes(spec.model, act) + inputs_bytes(act);
  // Strategies that keep units gathered from forward to backward hold them
  // all at the loss; the others hold at least the root.
  if (gathers && keeps_params_through_backward(p.sharding))
    for (const FlatUnit& f : u.units)
      at_loss += f.padded_elems * pbytes;
  else if (gathers && !u.units.empty())
    at_loss += u.units[0].padded_elems * pbytes;
  for (size_t g = 0; g < u.segments.size(); ++g) {
    const Segment& s = u.segments[g];
    if (s.group != static_cast<int>(g)) continue;
    const bool block = s.layers.front().kind == LayerId::Kind::Block;
    if (recompute && block)
      at_loss += p.offload_activations ? 0 : segment_input_bytes(spec.model, act);
    else
      at_loss += group_saved_bytes(u, static_cast<int>(g), act);
  }
  m.device += std::max(backward, at_loss);
  return m;
}

bool bound_fits(const MemoryBound& m, const Hardware& hw) {
  if (!hw.gpu) return m.device + m.host <= usable_bytes(hw);
  return m.device <= usable_bytes(hw) && m.host <= usable_host_bytes(hw);
}

double stream_bound_ms(const Schedule& s, const Hardware& hw, bool compute_only) {
  std::vector<double> busy(kStreamNames.size(), 0.0);
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::Free) continue;
    const bool layer =
        op.kind == OpKind::Forward || op.kind == OpKind::Recompute || op.kind == OpKind::Backward;
    if (compute_only && !layer) continue;
    busy[static_cast<int>(op.stream)] += op_seconds(s, op, hw);
  }
  return 1e3 * *std::max_element(busy.begin(), busy.end());
}

}  // namespace fsdpgen
