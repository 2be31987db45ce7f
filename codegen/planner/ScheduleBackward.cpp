// ScheduleBackward: the builder's backward (codegen/planner/ScheduleBuilder.h):
// segments in reverse with their recomputes, each unit's gradient reduced
// after its last backward (codegen/planner/Gradients.h). Strategy semantics
// follow DESIGN §4:
//   sharded (shard group > 1): AG before use, RS after the unit's last backward
//   free after forward (full_shard, hybrid_shard) vs kept until backward (ZeRO-2, no_shard)
#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/ScheduleBuilder.h"

namespace fsdpgen::schedule_builder {
namespace {

// One compute op of backward in issue order: segment `segment`'s
// backward, or (recompute = block) its forward again.
struct Use {
  int segment;
  bool recompute;
};

// Backward's uses: segments in reverse; under recompute = block, before
// the backward of a group's last segment, its segments' recomputes in
// forward order.
std::vector<Use> backward_uses(const StepShape& s) {
  std::vector<Use> uses;
  for (int i = static_cast<int>(s.segments().size()) - 1; i >= 0; --i) {
    if (s.recomputes(i) && s.last_of_group(i))
      for (int j : group_segments(s.lowered, s.segments()[i].group))
        if (s.recompute_rebuilds(j)) uses.push_back({j, true});
    uses.push_back({i, false});
  }
  return uses;
}

// A custom layer writes its output even when recomputed (into the backward
// scratch's custom_out, codegen/planner/Activations.h).
void recompute(Builder& b, int j, int mb, int rscratch, int scratch) {
  const StepShape& s = b.shape;
  const Segment& seg = s.segments()[j];
  const int u = seg.unit, g = seg.group;
  Op r = make_op(OpKind::Recompute, StreamId::Compute, u, j, mb);
  r.flops = segment_forward_flops(s.spec.model, seg, s.act.tokens);
  r.operands = {{Role::Params, b.gathers.params_of(u)},
                {Role::Saved, b.micro.acts[g]},
                {Role::RecomputeScratch, rscratch},
                {Role::Workspace, b.persistent.workspace}};
  if (!s.spec.model.custom.empty()) r.operands.push_back({Role::Scratch, scratch});
  if (b.persistent.rope >= 0) r.operands.push_back({Role::RopeTables, b.persistent.rope});
  r.deps = {b.gathers.op(u)};
  if (b.micro.fetch_op[g] >= 0) r.deps.push_back(b.micro.fetch_op[g]);
  b.issue.emit(r);
}

}  // namespace

void issue_backward(Builder& b, int mb) {
  const StepShape& s = b.shape;
  MicroBatchBuffers& x = b.micro;
  const std::vector<Use> uses = backward_uses(s);
  std::vector<int> order;  // the segment of each use, for prefetch
  for (const Use& use : uses)
    order.push_back(use.segment);
  int scratch = b.issue.buffer(BufferKind::BackwardScratch, MemSpace::Device,
                               fmt::format("grad_acts.mb{}", mb),
                               backward_scratch_bytes(s.spec.model, s.act), -1, mb, false);
  const BackwardPrefetch bp = s.p.prefetch.backward;
  int rscratch = -1;
  for (size_t k = 0; k < uses.size(); ++k) {
    const int i = uses[k].segment;
    const Segment& seg = s.segments()[i];
    const int u = seg.unit, g = seg.group;
    b.gathers.gather(u, "bwd", mb);
    if (bp == BackwardPrefetch::Pre) b.gathers.prefetch(order, k, "bwd", mb);
    if (s.offload_acts) {
      x.fetch_saved(g, mb);
      for (size_t a = k + 1; a < uses.size(); ++a)
        if (s.segments()[uses[a].segment].group != g) {
          x.fetch_saved(s.segments()[uses[a].segment].group, mb);
          break;
        }
    }
    if (s.recomputes(i) && rscratch < 0)
      rscratch = b.issue.buffer(BufferKind::RecomputeScratch, MemSpace::Device,
                                fmt::format("recompute.s{}.mb{}", g, mb),
                                group_saved_bytes(s.lowered, g, s.act), u, mb, false);
    if (uses[k].recompute) {
      recompute(b, i, mb, rscratch, scratch);
      // Gathered again for its backward; this group's last segment's runs next.
      if (s.free_after_forward && u != 0 && !s.last_of_group(i)) b.gathers.release(u);
      continue;
    }
    const int grads = b.gradients.unsharded(u, mb);
    Op op = make_op(OpKind::Backward, StreamId::Compute, u, i, mb);
    op.flops = 2 * segment_forward_flops(s.spec.model, seg, s.act.tokens);
    op.operands = {{Role::Params, b.gathers.params_of(u)},
                   {Role::Saved, x.acts[g]},
                   {Role::RecomputeScratch, s.recomputes(i) ? rscratch : -1},
                   {Role::Grads, grads},
                   {Role::Scratch, scratch},
                   {Role::Workspace, b.persistent.workspace}};
    if (i == 0 || seg.has_loss) op.operands.push_back({Role::Inputs, x.inputs});
    if (seg.has_loss) op.operands.push_back({Role::Logits, x.logits});
    if (b.persistent.rope >= 0) op.operands.push_back({Role::RopeTables, b.persistent.rope});
    op.deps = {b.gathers.op(u)};
    int bop = b.issue.emit(op);
    const bool group_done = i == g;
    b.issue.free_now({group_done ? x.acts[g] : -1, group_done && s.recomputes(i) ? rscratch : -1,
                      seg.has_loss ? x.logits : -1, i == 0 ? x.inputs : -1, i == 0 ? scratch : -1});
    if (group_done && s.recomputes(i)) rscratch = -1;
    if (bp == BackwardPrefetch::Post) b.gathers.prefetch(order, k, "bwd", mb);
    if (s.first_forward_segment(i)) {
      if (u != 0 || mb == s.M - 1) b.gathers.release(u);
      b.gradients.reduce(u, mb, bop);
    }
  }
}

}  // namespace fsdpgen::schedule_builder
