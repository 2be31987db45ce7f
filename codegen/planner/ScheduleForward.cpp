// ScheduleForward: the Builder's forward (codegen/planner/ScheduleBuilder.h): gathers
// and prefetches, forward segments, offloading the activations saved for backward.
#include "codegen/planner/ScheduleBuilder.h"

#include <algorithm>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"

namespace fsdpgen::schedule_builder {

int Builder::alive_gathered_blocks() const {
  int n = 0;
  for (size_t u = 1; u < gathered_.size(); ++u)
    n += gathered_[u] >= 0;
  return n;
}

void Builder::gather(int u, const char* phase, int mb) {
  if (!needs_gather(u) || gathered_[u] >= 0) return;
  // The host-copy staging of the previous gather is done once its all-gather is.
  free_now(gather_pending_);
  gather_pending_.clear();
  int src = shard_[u];
  int dst =
      buffer(BufferKind::UnshardedParams, MemSpace::Device,
             fmt::format("params.u{}.{}.mb{}", u, phase, mb), unit_bytes(u, pbytes_), u, mb, false);
  int h2d = -1, staging = -1;
  if (offload_) {
    Op copy = make_op(OpKind::CopyH2D, StreamId::Copy, u, -1, mb);
    copy.payload_bytes = shard_bytes(u, pbytes_);
    if (sharded_) {
      staging = buffer(BufferKind::CommStaging, MemSpace::Device,
                       fmt::format("h2d.u{}.{}.mb{}", u, phase, mb), shard_bytes(u, pbytes_), u, mb,
                       false);
      copy.operands = {{Role::Src, src}, {Role::Dst, staging}};
    } else {
      copy.operands = {{Role::Src, src}, {Role::Dst, dst}};
    }
    h2d = emit(copy);
    src = staging;
  }
  int producer = h2d;
  if (sharded_) {
    Op ag = collective(OpKind::AllGather, StreamId::AllGather, u, mb, CommGroup::Shard, S_,
                       unit_bytes(u, pbytes_));
    ag.operands = {{Role::Src, src}, {Role::Dst, dst}};
    ag.deps = {h2d};
    producer = emit(ag);
    gather_pending_.push_back(staging);
  }
  gathered_[u] = dst;
  gather_op_[u] = producer;
}

void Builder::release_params(int u) {
  if (!needs_gather(u) || gathered_[u] < 0) return;
  free_now({gathered_[u]});
  gathered_[u] = -1;
}

void Builder::prefetch(const std::vector<int>& order, size_t pos, const char* phase, int mb) {
  int window = static_cast<int>(p_.prefetch.max_inflight) - 1;
  int current = segments()[order[pos]].unit;
  std::vector<int> ahead;
  for (size_t k = pos + 1; k < order.size() && static_cast<int>(ahead.size()) < window; ++k) {
    int v = segments()[order[k]].unit;
    if (v == current || v == 0 || std::find(ahead.begin(), ahead.end(), v) != ahead.end()) continue;
    ahead.push_back(v);
  }
  for (int v : ahead) {
    if (gathered_[v] >= 0 || !needs_gather(v)) continue;
    if (free_after_forward_ && alive_gathered_blocks() >= p_.prefetch.max_inflight) break;
    gather(v, phase, mb);
  }
}

bool Builder::recompute_rebuilds(int i) const {
  const Segment& seg = segments()[i];
  const LayerId& l = seg.layers.front();
  return !(last_of_group(i) && seg.layers.size() == 1 && writes_only_block_output(spec_.model, l));
}

void Builder::forward(int mb) {
  if (mb == 0) gather(0, "step", mb);
  const int n = static_cast<int>(segments().size());
  acts_.assign(n, -1);
  host_acts_.assign(n, -1);
  fetch_op_.assign(n, -1);
  inputs_ = buffer(BufferKind::Inputs, MemSpace::Device, fmt::format("inputs.mb{}", mb),
                   inputs_bytes(act_), -1, mb, false);
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i)
    order[i] = i;
  int fscratch = -1;
  for (int i = 0; i < n; ++i) {
    const Segment& seg = segments()[i];
    const int u = seg.unit, g = seg.group;
    gather(u, "fwd", mb);
    if (p_.prefetch.forward) prefetch(order, i, "fwd", mb);
    if (acts_[g] < 0)
      acts_[g] = buffer(BufferKind::Activations, MemSpace::Device,
                        fmt::format("acts.s{}.mb{}", g, mb), saved_bytes(g), u, mb, false);
    // The next group's saved activations hold its input, which this forward writes.
    const bool next_group = i + 1 < n && segments()[i + 1].group == i + 1;
    if (next_group)
      acts_[i + 1] =
          buffer(BufferKind::Activations, MemSpace::Device, fmt::format("acts.s{}.mb{}", i + 1, mb),
                 saved_bytes(i + 1), segments()[i + 1].unit, mb, false);
    if (seg.has_loss)
      logits_ = buffer(BufferKind::Logits, MemSpace::Device, fmt::format("logits.mb{}", mb),
                       logits_bytes(spec_.model, act_), u, mb, false);
    // recompute = block: the group's intermediates go to scratch that is
    // freed after its last segment; only the group's input stays saved.
    if (recomputes(i) && i == g)
      fscratch = buffer(BufferKind::RecomputeScratch, MemSpace::Device,
                        fmt::format("fwd_scratch.s{}.mb{}", i, mb),
                        group_saved_bytes(s_.units, g, act_), u, mb, false);
    Op f = make_op(OpKind::Forward, StreamId::Compute, u, i, mb);
    f.flops = segment_forward_flops(spec_.model, seg, act_.tokens);
    f.operands = {{Role::Params, params_of(u)},
                  {Role::Saved, acts_[g]},
                  {Role::NextInput, next_group ? acts_[i + 1] : -1},
                  {Role::RecomputeScratch, recomputes(i) ? fscratch : -1},
                  {Role::Workspace, workspace_}};
    if (i == 0 || seg.has_loss) f.operands.push_back({Role::Inputs, inputs_});
    if (seg.has_loss) f.operands.push_back({Role::Logits, logits_});
    if (rope_ >= 0) f.operands.push_back({Role::RopeTables, rope_});
    f.deps = {gather_op_[u]};
    const int fop = emit(f);
    if (seg.has_loss) loss_forward_ = fop;
    if (recomputes(i) && last_of_group(i)) {
      free_now({fscratch});
      fscratch = -1;
      if (offload_acts_) offload_saved(g, mb, fop);
    }
    if (free_after_forward_ && u != 0 && last_forward_segment(i)) release_params(u);
  }
}

void Builder::offload_saved(int g, int mb, int forward_op) {
  const int u = segments()[g].unit;
  host_acts_[g] = buffer(BufferKind::Activations, MemSpace::Host,
                         fmt::format("acts_host.s{}.mb{}", g, mb), saved_bytes(g), u, mb, false);
  Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, g, mb);
  d2h.payload_bytes = saved_bytes(g);
  d2h.operands = {{Role::Src, acts_[g]}, {Role::Dst, host_acts_[g]}};
  d2h.deps = {forward_op};
  emit(d2h);
  free_now({acts_[g]});
  acts_[g] = -1;
}

void Builder::fetch_saved(int g, int mb) {
  if (host_acts_[g] < 0 || fetch_op_[g] >= 0) return;
  const int u = segments()[g].unit;
  acts_[g] = buffer(BufferKind::Activations, MemSpace::Device,
                    fmt::format("acts.s{}.mb{}.back", g, mb), saved_bytes(g), u, mb, false);
  Op h2d = make_op(OpKind::CopyH2D, StreamId::Copy, u, g, mb);
  h2d.payload_bytes = saved_bytes(g);
  h2d.operands = {{Role::Src, host_acts_[g]}, {Role::Dst, acts_[g]}};
  fetch_op_[g] = emit(h2d);
  free_now({host_acts_[g]});
  host_acts_[g] = -1;
}

bool Builder::last_forward_segment(int i) const {
  for (size_t k = i + 1; k < segments().size(); ++k)
    if (segments()[k].unit == segments()[i].unit) return false;
  return true;
}

bool Builder::first_forward_segment(int i) const {
  for (int k = 0; k < i; ++k)
    if (segments()[k].unit == segments()[i].unit) return false;
  return true;
}

}  // namespace fsdpgen::schedule_builder
