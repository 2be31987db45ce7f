// ScheduleForward: the builder's forward (codegen/planner/ScheduleBuilder.h):
// gathers and prefetches, forward segments, offloading the activations
// saved for backward.
#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/ScheduleBuilder.h"

namespace fsdpgen::schedule_builder {

void issue_forward(Builder& b, int mb) {
  const StepShape& s = b.shape;
  MicroBatchBuffers& x = b.micro;
  if (mb == 0) b.gathers.gather(0, "step", mb);
  const int n = static_cast<int>(s.segments().size());
  x.start(mb);
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i)
    order[i] = i;
  int fscratch = -1;
  for (int i = 0; i < n; ++i) {
    const Segment& seg = s.segments()[i];
    const int u = seg.unit, g = seg.group;
    b.gathers.gather(u, "fwd", mb);
    if (s.p.prefetch.forward) b.gathers.prefetch(order, i, "fwd", mb);
    if (x.acts[g] < 0)
      x.acts[g] =
          b.issue.buffer(BufferKind::Activations, MemSpace::Device,
                         fmt::format("acts.s{}.mb{}", g, mb), s.saved_bytes(g), u, mb, false);
    // The next group's saved activations hold its input, which this forward writes.
    const bool next_group = i + 1 < n && s.segments()[i + 1].group == i + 1;
    if (next_group)
      x.acts[i + 1] = b.issue.buffer(BufferKind::Activations, MemSpace::Device,
                                     fmt::format("acts.s{}.mb{}", i + 1, mb), s.saved_bytes(i + 1),
                                     s.segments()[i + 1].unit, mb, false);
    if (seg.has_loss)
      x.logits =
          b.issue.buffer(BufferKind::Logits, MemSpace::Device, fmt::format("logits.mb{}", mb),
                         logits_bytes(s.spec.model, s.act), u, mb, false);
    // recompute = block: the group's intermediates go to scratch that is
    // freed after its last segment; only the group's input stays saved.
    if (s.recomputes(i) && i == g)
      fscratch = b.issue.buffer(BufferKind::RecomputeScratch, MemSpace::Device,
                                fmt::format("fwd_scratch.s{}.mb{}", i, mb),
                                group_saved_bytes(s.lowered, g, s.act), u, mb, false);
    Op f = make_op(OpKind::Forward, StreamId::Compute, u, i, mb);
    f.flops = segment_forward_flops(s.spec.model, seg, s.act.tokens);
    f.operands = {{Role::Params, b.gathers.params_of(u)},
                  {Role::Saved, x.acts[g]},
                  {Role::NextInput, next_group ? x.acts[i + 1] : -1},
                  {Role::RecomputeScratch, s.recomputes(i) ? fscratch : -1},
                  {Role::Workspace, b.persistent.workspace}};
    if (i == 0 || seg.has_loss) f.operands.push_back({Role::Inputs, x.inputs});
    if (seg.has_loss) f.operands.push_back({Role::Logits, x.logits});
    if (b.persistent.rope >= 0) f.operands.push_back({Role::RopeTables, b.persistent.rope});
    f.deps = {b.gathers.op(u)};
    const int fop = b.issue.emit(f);
    if (seg.has_loss) b.loss_forward = fop;
    if (s.recomputes(i) && s.last_of_group(i)) {
      b.issue.free_now({fscratch});
      fscratch = -1;
      if (s.offload_acts) x.offload_saved(g, mb, fop);
    }
    if (s.free_after_forward && u != 0 && s.last_forward_segment(i)) b.gathers.release(u);
  }
}

}  // namespace fsdpgen::schedule_builder
