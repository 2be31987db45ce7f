// ScheduleOptimizer: the Builder's optimizer step (codegen/planner/ScheduleBuilder.h):
// gradient norm, guard, Muon's gathers and orthogonalization, the updates.
#include "codegen/planner/ScheduleBuilder.h"

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"

namespace fsdpgen::schedule_builder {

void Builder::muon_gather(int u) {
  const MuonUnit m = muon_unit(s_.muon, u, units()[u].shard_elems, S_);
  muon_gathered_[u] =
      buffer(BufferKind::MuonGathered, MemSpace::Device, fmt::format("muon_gathered.u{}", u),
             m.gathered_elems * (gbytes_ + 4), u, -1, false);
  Op g = collective(OpKind::MuonGather, StreamId::AllGather, u, -1, CommGroup::Shard, S_,
                    m.exchanged_elems * gbytes_);
  g.operands = {{Role::GradShard, grad_shard_[u]}, {Role::MuonGathered, muon_gathered_[u]}};
  g.deps = {last_reduce_[u]};
  muon_gather_op_[u] = emit(g);
}

int Builder::muon_orthogonalize(int u, const std::vector<int>& gates) {
  const MuonUnit m = muon_unit(s_.muon, u, units()[u].shard_elems, S_);
  muon_update_[u] = buffer(BufferKind::MuonUpdate, MemSpace::Device,
                           fmt::format("muon_update.u{}", u), shard_bytes(u, 4), u, -1, false);
  Op ns = make_op(OpKind::MuonOrthogonalize, StreamId::Compute, u, -1, -1);
  if (sharded_)
    ns.operands = {{Role::MuonGathered, muon_gathered_[u]}};
  else  // the whole matrices are in the gradient shard; the updates go to their places
    ns.operands = {{Role::GradShard, grad_shard_[u]}, {Role::MuonUpdate, muon_update_[u]}};
  ns.operands.push_back({Role::MuonMomentum, muon_momentum_});
  ns.operands.push_back({Role::Workspace, muon_workspace_});
  ns.deps = gates;
  ns.deps.push_back(sharded_ ? muon_gather_op_[u] : last_reduce_[u]);
  ns.flops = m.ns_flops;
  // The momentum step reads the gradient and the momentum and writes both
  // that and the iterate; the update is written once.
  ns.memory_bytes = m.gathered_elems * (gbytes_ + 4 * 4);
  const int done = emit(ns);
  if (!sharded_) return done;
  Op sc = collective(OpKind::MuonScatter, StreamId::ReduceScatter, u, -1, CommGroup::Shard, S_,
                     m.exchanged_elems * 4);
  sc.operands = {{Role::MuonGathered, muon_gathered_[u]}, {Role::MuonUpdate, muon_update_[u]}};
  sc.deps = {done};
  const int scattered = emit(sc);
  free_now({muon_gathered_[u]});
  return scattered;
}

void Builder::optimizer() {
  pending_.insert(pending_.end(), gather_pending_.begin(), gather_pending_.end());
  gather_pending_.clear();
  free_now(pending_);
  pending_.clear();
  release_params(0);
  // Muon's gathers run two units ahead of the Newton-Schulz iterations, so
  // that at most two units' matrices are gathered at a time; the first two
  // overlap the norm.
  std::vector<int> muon_units;
  for (const FlatUnit& f : units())
    if (has_params(f.index) && has_muon(f.index)) muon_units.push_back(f.index);
  size_t next_gather = 0;
  auto gather_ahead = [&] {
    if (sharded_ && next_gather < muon_units.size()) muon_gather(muon_units[next_gather++]);
  };
  gather_ahead();
  gather_ahead();
  const StreamId where = offload_ ? StreamId::Host : StreamId::Compute;
  Op norm = make_op(OpKind::GradNorm, where, -1, -1, -1);
  for (const FlatUnit& f : units()) {
    if (!has_params(f.index)) continue;
    norm.operands.push_back({Role::GradShard, grad_shard_[f.index]});
    norm.deps.push_back(last_reduce_[f.index]);
    norm.memory_bytes += shard_bytes(f.index, gbytes_);
  }
  int gate = emit(norm);
  if (sharded_) {
    // One fp32 partial sum per rank.
    Op ar =
        collective(OpKind::AllReduce, StreamId::AllReduce, -1, -1, CommGroup::Shard, S_, 4 * S_);
    ar.deps = {gate};
    gate = emit(ar);
  }
  std::vector<int> gates = {gate};
  if (spec_.train.guard.loss_z > 0) {
    // The loss-spike guard's gate: the step's loss summed over every rank
    // (one fp32 per rank), once the last micro-batch's loss is known.
    Op loss = collective(OpKind::AllReduce, StreamId::AllReduce, -1, -1, CommGroup::World, p_.world,
                         4 * p_.world);
    loss.deps = {loss_forward_};
    gates.push_back(emit(loss));
  }
  const int64_t states = optimizer_states();
  for (const FlatUnit& f : units()) {
    if (!has_params(f.index)) continue;
    const int u = f.index;
    const int muon_done = has_muon(u) ? muon_orthogonalize(u, gates) : -1;
    if (has_muon(u)) gather_ahead();
    Op opt = make_op(OpKind::OptimizerStep, where, u, -1, -1);
    opt.operands = {{Role::Params, shard_[u]},
                    {Role::Master, master_[u]},
                    {Role::OptimizerState, state_[u]},
                    {Role::GradShard, grad_shard_[u]},
                    {Role::MuonUpdate, has_muon(u) ? muon_update_[u] : -1}};
    opt.deps = gates;
    opt.deps.push_back(last_reduce_[u]);
    opt.deps.push_back(muon_done);
    // Reads grad, master and state; writes master, state and the param-dtype shard.
    opt.memory_bytes = f.shard_elems * (gbytes_ + 2 * mbytes_ + 2 * states * mbytes_ + pbytes_);
    emit(opt);
    std::vector<int> done = {has_muon(u) ? muon_update_[u] : -1};
    if (!s_.buffers[grad_shard_[u]].persistent) done.push_back(grad_shard_[u]);
    free_now(done);
  }
}

}  // namespace fsdpgen::schedule_builder
