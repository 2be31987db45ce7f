// MuonExchange: the gather, Newton-Schulz and scatter ops of Muon's step.
#include "codegen/planner/MuonExchange.h"

#include <fmt/format.h>

namespace fsdpgen::schedule_builder {

MuonExchange::MuonExchange(const StepShape& shape, IssueOrder& issue,
                           const PersistentBuffers& persistent, const Gradients& gradients)
    : shape_(shape), issue_(issue), persistent_(persistent), gradients_(gradients) {
  const size_t n = shape.units().size();
  gathered_.assign(n, -1);
  update_.assign(n, -1);
  gather_op_.assign(n, -1);
}

void MuonExchange::gather(int u) {
  const StepShape& s = shape_;
  const MuonUnit m = muon_unit(s.muon_plan, u, s.units()[u].shard_elems, s.S);
  gathered_[u] =
      issue_.buffer(BufferKind::MuonGathered, MemSpace::Device, fmt::format("muon_gathered.u{}", u),
                    m.gathered_elems * (s.gbytes + 4), u, -1, false);
  Op g = collective(OpKind::MuonGather, StreamId::AllGather, u, -1, CommGroup::Shard, s.S,
                    m.exchanged_elems * s.gbytes);
  g.operands = {{Role::GradShard, gradients_.shard(u)}, {Role::MuonGathered, gathered_[u]}};
  g.deps = {gradients_.last_reduce(u)};
  gather_op_[u] = issue_.emit(g);
}

int MuonExchange::orthogonalize(int u, const std::vector<int>& gates) {
  const StepShape& s = shape_;
  const MuonUnit m = muon_unit(s.muon_plan, u, s.units()[u].shard_elems, s.S);
  update_[u] = issue_.buffer(BufferKind::MuonUpdate, MemSpace::Device,
                             fmt::format("muon_update.u{}", u), s.shard_bytes(u, 4), u, -1, false);
  Op ns = make_op(OpKind::MuonOrthogonalize, StreamId::Compute, u, -1, -1);
  if (s.sharded)
    ns.operands = {{Role::MuonGathered, gathered_[u]}};
  else  // the whole matrices are in the gradient shard; the updates go to their places
    ns.operands = {{Role::GradShard, gradients_.shard(u)}, {Role::MuonUpdate, update_[u]}};
  ns.operands.push_back({Role::MuonMomentum, persistent_.muon_momentum});
  ns.operands.push_back({Role::Workspace, persistent_.muon_workspace});
  ns.deps = gates;
  ns.deps.push_back(s.sharded ? gather_op_[u] : gradients_.last_reduce(u));
  ns.flops = m.ns_flops;
  // The momentum step reads the gradient and the momentum and writes both
  // that and the iterate; the update is written once.
  ns.memory_bytes = m.gathered_elems * (s.gbytes + 4 * 4);
  const int done = issue_.emit(ns);
  if (!s.sharded) return done;
  Op sc = collective(OpKind::MuonScatter, StreamId::ReduceScatter, u, -1, CommGroup::Shard, s.S,
                     m.exchanged_elems * 4);
  sc.operands = {{Role::MuonGathered, gathered_[u]}, {Role::MuonUpdate, update_[u]}};
  sc.deps = {done};
  const int scattered = issue_.emit(sc);
  issue_.free_now({gathered_[u]});
  return scattered;
}

}  // namespace fsdpgen::schedule_builder
