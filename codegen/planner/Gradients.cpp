// Gradients: the unsharded gradients and their reduction. Strategy
// semantics follow DESIGN §4:
//   sharded (shard group > 1): RS after the unit's last backward
//   replicated (replicas > 1): AR of the reduced gradient over the replica group
#include "codegen/planner/Gradients.h"

#include <fmt/format.h>

namespace fsdpgen::schedule_builder {

Gradients::Gradients(const StepShape& shape, IssueOrder& issue) : shape_(shape), issue_(issue) {
  const size_t n = shape.units().size();
  unsharded_.assign(n, -1);
  shard_.assign(n, -1);
  last_reduce_.assign(n, -1);
}

int Gradients::unsharded(int u, int mb) {
  const StepShape& s = shape_;
  if (unsharded_[u] < 0 && s.has_params(u)) {
    bool per_step = s.p.accumulate.reduce == AccumulateReduce::Last || !(s.sharded || s.replicated);
    unsharded_[u] =
        issue_.buffer(BufferKind::UnshardedGrads, MemSpace::Device,
                      per_step ? fmt::format("grads.u{}", u) : fmt::format("grads.u{}.mb{}", u, mb),
                      s.unit_bytes(u, s.rbytes), u, per_step ? -1 : mb, false);
  }
  return unsharded_[u];
}

std::vector<int> Gradients::take_pending() {
  std::vector<int> out;
  out.swap(pending_);
  return out;
}

void Gradients::reduce(int u, int mb, int last_backward) {
  const StepShape& s = shape_;
  if (!s.has_params(u)) return;
  const bool last_mb = mb == s.M - 1;
  if (!last_mb && s.p.accumulate.reduce == AccumulateReduce::Last)
    return;  // keep accumulating unsharded
  // World 1: nothing to reduce; the step's fp32 gradients accumulate unsharded.
  const bool local = !s.sharded && !s.replicated;
  if (local && !last_mb) return;
  if (local && !s.offload) {
    shard_[u] = unsharded_[u], unsharded_[u] = -1;  // the fp32 grads are the shard
    return;
  }
  // Frees that waited on the previous unit's reduction go now: it ran
  // while this unit's backward computed.
  issue_.free_now(take_pending());
  if (shard_[u] < 0)
    shard_[u] =
        issue_.buffer(BufferKind::GradShard, MemSpace::Device, fmt::format("grad_shard.u{}", u),
                      s.shard_bytes(u, s.gbytes), u, -1, false);
  int producer = last_backward;
  if (local) {
    // Offload at world 1: the step's gradients go to the host shard, once.
    Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, -1, -1);
    d2h.payload_bytes = s.unit_bytes(u, s.rbytes);
    d2h.operands = {{Role::Src, unsharded_[u]}, {Role::Dst, shard_[u]}};
    d2h.deps = {last_backward};
    producer = issue_.emit(d2h);
  }
  if (s.sharded) {
    bool staged = s.rbytes != s.gbytes || s.M > 1 || s.offload;
    int staging = staged ? issue_.buffer(BufferKind::CommStaging, MemSpace::Device,
                                         fmt::format("rs_out.u{}.mb{}", u, mb),
                                         s.shard_bytes(u, s.rbytes), u, mb, false)
                         : -1;
    Op rs = collective(OpKind::ReduceScatter, StreamId::ReduceScatter, u, mb, CommGroup::Shard, s.S,
                       s.unit_bytes(u, s.rbytes));
    rs.operands = {{Role::Grads, unsharded_[u]},
                   {Role::Staging, staging},
                   {Role::GradShard, s.offload ? -1 : shard_[u]}};
    rs.deps = {last_backward};
    producer = issue_.emit(rs);
    if (s.offload) {
      Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, -1, mb);
      d2h.payload_bytes = s.shard_bytes(u, s.rbytes);
      d2h.operands = {{Role::Src, staging}, {Role::Dst, shard_[u]}};
      d2h.deps = {producer};
      producer = issue_.emit(d2h);
    }
    pending_.push_back(staging);
  }
  if (s.replicated && (last_mb || !s.sharded)) {
    // Hybrid: the accumulated shard, once per step. no_shard: the whole gradient.
    Op ar = collective(OpKind::AllReduce, StreamId::AllReduce, u, s.sharded ? -1 : mb,
                       CommGroup::Replica, s.R,
                       s.sharded ? s.shard_bytes(u, s.rbytes) : s.unit_bytes(u, s.rbytes));
    ar.operands = {{Role::Grads, s.sharded ? -1 : unsharded_[u]}, {Role::GradShard, shard_[u]}};
    ar.deps = {producer};
    producer = issue_.emit(ar);
  }
  pending_.push_back(unsharded_[u]);
  unsharded_[u] = -1;
  last_reduce_[u] = producer;
}

}  // namespace fsdpgen::schedule_builder
