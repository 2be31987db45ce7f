// ScheduleBackward: the Builder's backward (codegen/planner/ScheduleBuilder.h): segments
// in reverse with their recomputes, and the gradient reductions. Strategy
// semantics follow DESIGN §4:
//   sharded (shard group > 1): AG before use, RS after the unit's last backward
//   replicated (replicas > 1): AR of the reduced gradient over the replica group
//   free after forward (full_shard, hybrid_shard) vs kept until backward (ZeRO-2, no_shard)
#include "codegen/planner/ScheduleBuilder.h"

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"

namespace fsdpgen::schedule_builder {

std::vector<Builder::Use> Builder::backward_uses() const {
  std::vector<Use> uses;
  for (int i = static_cast<int>(segments().size()) - 1; i >= 0; --i) {
    if (recomputes(i) && last_of_group(i))
      for (int j : group_segments(s_.units, segments()[i].group))
        if (recompute_rebuilds(j)) uses.push_back({j, true});
    uses.push_back({i, false});
  }
  return uses;
}

void Builder::recompute(int j, int mb, int rscratch, int scratch) {
  const Segment& seg = segments()[j];
  const int u = seg.unit, g = seg.group;
  Op r = make_op(OpKind::Recompute, StreamId::Compute, u, j, mb);
  r.flops = segment_forward_flops(spec_.model, seg, act_.tokens);
  r.operands = {{Role::Params, params_of(u)},
                {Role::Saved, acts_[g]},
                {Role::RecomputeScratch, rscratch},
                {Role::Workspace, workspace_}};
  if (!spec_.model.custom.empty()) r.operands.push_back({Role::Scratch, scratch});
  if (rope_ >= 0) r.operands.push_back({Role::RopeTables, rope_});
  r.deps = {gather_op_[u]};
  if (fetch_op_[g] >= 0) r.deps.push_back(fetch_op_[g]);
  emit(r);
}

void Builder::backward(int mb) {
  const std::vector<Use> uses = backward_uses();
  std::vector<int> order;  // the segment of each use, for prefetch
  for (const Use& x : uses)
    order.push_back(x.segment);
  int scratch =
      buffer(BufferKind::BackwardScratch, MemSpace::Device, fmt::format("grad_acts.mb{}", mb),
             backward_scratch_bytes(spec_.model, act_), -1, mb, false);
  const BackwardPrefetch bp = p_.prefetch.backward;
  int rscratch = -1;
  for (size_t k = 0; k < uses.size(); ++k) {
    const int i = uses[k].segment;
    const Segment& seg = segments()[i];
    const int u = seg.unit, g = seg.group;
    gather(u, "bwd", mb);
    if (bp == BackwardPrefetch::Pre) prefetch(order, k, "bwd", mb);
    if (offload_acts_) {
      fetch_saved(g, mb);
      for (size_t a = k + 1; a < uses.size(); ++a)
        if (segments()[uses[a].segment].group != g) {
          fetch_saved(segments()[uses[a].segment].group, mb);
          break;
        }
    }
    if (recomputes(i) && rscratch < 0)
      rscratch = buffer(BufferKind::RecomputeScratch, MemSpace::Device,
                        fmt::format("recompute.s{}.mb{}", g, mb),
                        group_saved_bytes(s_.units, g, act_), u, mb, false);
    if (uses[k].recompute) {
      recompute(i, mb, rscratch, scratch);
      // Gathered again for its backward; this group's last segment's runs next.
      if (free_after_forward_ && u != 0 && !last_of_group(i)) release_params(u);
      continue;
    }
    if (grads_[u] < 0 && has_params(u)) {
      bool per_step = p_.accumulate.reduce == AccumulateReduce::Last || !(sharded_ || replicated_);
      grads_[u] =
          buffer(BufferKind::UnshardedGrads, MemSpace::Device,
                 per_step ? fmt::format("grads.u{}", u) : fmt::format("grads.u{}.mb{}", u, mb),
                 unit_bytes(u, rbytes_), u, per_step ? -1 : mb, false);
    }
    Op b = make_op(OpKind::Backward, StreamId::Compute, u, i, mb);
    b.flops = 2 * segment_forward_flops(spec_.model, seg, act_.tokens);
    b.operands = {{Role::Params, params_of(u)},
                  {Role::Saved, acts_[g]},
                  {Role::RecomputeScratch, recomputes(i) ? rscratch : -1},
                  {Role::Grads, grads_[u]},
                  {Role::Scratch, scratch},
                  {Role::Workspace, workspace_}};
    if (i == 0 || seg.has_loss) b.operands.push_back({Role::Inputs, inputs_});
    if (seg.has_loss) b.operands.push_back({Role::Logits, logits_});
    if (rope_ >= 0) b.operands.push_back({Role::RopeTables, rope_});
    b.deps = {gather_op_[u]};
    int bop = emit(b);
    const bool group_done = i == g;
    free_now({group_done ? acts_[g] : -1, group_done && recomputes(i) ? rscratch : -1,
              seg.has_loss ? logits_ : -1, i == 0 ? inputs_ : -1, i == 0 ? scratch : -1});
    if (group_done && recomputes(i)) rscratch = -1;
    if (bp == BackwardPrefetch::Post) prefetch(order, k, "bwd", mb);
    if (first_forward_segment(i)) {
      if (u != 0 || mb == M_ - 1) release_params(u);
      reduce(u, mb, bop);
    }
  }
}

void Builder::reduce(int u, int mb, int last_backward) {
  if (!has_params(u)) return;
  const bool last_mb = mb == M_ - 1;
  if (!last_mb && p_.accumulate.reduce == AccumulateReduce::Last)
    return;  // keep accumulating unsharded
  // World 1: nothing to reduce; the step's fp32 gradients accumulate unsharded.
  const bool local = !sharded_ && !replicated_;
  if (local && !last_mb) return;
  if (local && !offload_) {
    grad_shard_[u] = grads_[u], grads_[u] = -1;  // the fp32 grads are the shard
    return;
  }
  // Frees that waited on the previous unit's reduction go now: it ran
  // while this unit's backward computed.
  free_now(pending_);
  pending_.clear();
  if (grad_shard_[u] < 0)
    grad_shard_[u] =
        buffer(BufferKind::GradShard, MemSpace::Device, fmt::format("grad_shard.u{}", u),
               shard_bytes(u, gbytes_), u, -1, false);
  int producer = last_backward;
  if (local) {
    // Offload at world 1: the step's gradients go to the host shard, once.
    Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, -1, -1);
    d2h.payload_bytes = unit_bytes(u, rbytes_);
    d2h.operands = {{Role::Src, grads_[u]}, {Role::Dst, grad_shard_[u]}};
    d2h.deps = {last_backward};
    producer = emit(d2h);
  }
  if (sharded_) {
    bool staged = rbytes_ != gbytes_ || M_ > 1 || offload_;
    int staging = staged ? buffer(BufferKind::CommStaging, MemSpace::Device,
                                  fmt::format("rs_out.u{}.mb{}", u, mb), shard_bytes(u, rbytes_), u,
                                  mb, false)
                         : -1;
    Op rs = collective(OpKind::ReduceScatter, StreamId::ReduceScatter, u, mb, CommGroup::Shard, S_,
                       unit_bytes(u, rbytes_));
    rs.operands = {{Role::Grads, grads_[u]},
                   {Role::Staging, staging},
                   {Role::GradShard, offload_ ? -1 : grad_shard_[u]}};
    rs.deps = {last_backward};
    producer = emit(rs);
    if (offload_) {
      Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, -1, mb);
      d2h.payload_bytes = shard_bytes(u, rbytes_);
      d2h.operands = {{Role::Src, staging}, {Role::Dst, grad_shard_[u]}};
      d2h.deps = {producer};
      producer = emit(d2h);
    }
    pending_.push_back(staging);
  }
  if (replicated_ && (last_mb || !sharded_)) {
    // Hybrid: the accumulated shard, once per step. no_shard: the whole gradient.
    Op ar = collective(OpKind::AllReduce, StreamId::AllReduce, u, sharded_ ? -1 : mb,
                       CommGroup::Replica, R_,
                       sharded_ ? shard_bytes(u, rbytes_) : unit_bytes(u, rbytes_));
    ar.operands = {{Role::Grads, sharded_ ? -1 : grads_[u]}, {Role::GradShard, grad_shard_[u]}};
    ar.deps = {producer};
    producer = emit(ar);
  }
  pending_.push_back(grads_[u]);
  grads_[u] = -1;
  last_reduce_[u] = producer;
}

}  // namespace fsdpgen::schedule_builder
