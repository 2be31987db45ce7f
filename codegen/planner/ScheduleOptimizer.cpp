// ScheduleOptimizer: the builder's optimizer step (codegen/planner/ScheduleBuilder.h):
// gradient norm, guard, Muon's gathers and orthogonalization
// (codegen/planner/MuonExchange.h), the updates.
#include "codegen/planner/ScheduleBuilder.h"

namespace fsdpgen::schedule_builder {

void issue_optimizer(Builder& b) {
  const StepShape& s = b.shape;
  std::vector<int> late = b.gradients.take_pending();
  const std::vector<int> staging = b.gathers.take_staging();
  late.insert(late.end(), staging.begin(), staging.end());
  b.issue.free_now(late);
  b.gathers.release(0);
  // Muon's gathers run two units ahead of the Newton-Schulz iterations, so
  // that at most two units' matrices are gathered at a time; the first two
  // overlap the norm.
  std::vector<int> muon_units;
  for (const FlatUnit& f : s.units())
    if (s.has_params(f.index) && s.has_muon(f.index)) muon_units.push_back(f.index);
  size_t next_gather = 0;
  auto gather_ahead = [&] {
    if (s.sharded && next_gather < muon_units.size()) b.muon.gather(muon_units[next_gather++]);
  };
  gather_ahead();
  gather_ahead();
  const StreamId where = s.offload ? StreamId::Host : StreamId::Compute;
  Op norm = make_op(OpKind::GradNorm, where, -1, -1, -1);
  for (const FlatUnit& f : s.units()) {
    if (!s.has_params(f.index)) continue;
    norm.operands.push_back({Role::GradShard, b.gradients.shard(f.index)});
    norm.deps.push_back(b.gradients.last_reduce(f.index));
    norm.memory_bytes += s.shard_bytes(f.index, s.gbytes);
  }
  int gate = b.issue.emit(norm);
  if (s.sharded) {
    // One fp32 partial sum per rank.
    Op ar =
        collective(OpKind::AllReduce, StreamId::AllReduce, -1, -1, CommGroup::Shard, s.S, 4 * s.S);
    ar.deps = {gate};
    gate = b.issue.emit(ar);
  }
  std::vector<int> gates = {gate};
  if (s.spec.train.guard.loss_z > 0) {
    // The loss-spike guard's gate: the step's loss summed over every rank
    // (one fp32 per rank), once the last micro-batch's loss is known.
    Op loss = collective(OpKind::AllReduce, StreamId::AllReduce, -1, -1, CommGroup::World,
                         s.p.world, 4 * s.p.world);
    loss.deps = {b.loss_forward};
    gates.push_back(b.issue.emit(loss));
  }
  const int64_t states = s.optimizer_states();
  for (const FlatUnit& f : s.units()) {
    if (!s.has_params(f.index)) continue;
    const int u = f.index;
    const int muon_done = s.has_muon(u) ? b.muon.orthogonalize(u, gates) : -1;
    if (s.has_muon(u)) gather_ahead();
    Op opt = make_op(OpKind::OptimizerStep, where, u, -1, -1);
    opt.operands = {{Role::Params, b.persistent.shard[u]},
                    {Role::Master, b.persistent.master[u]},
                    {Role::OptimizerState, b.persistent.state[u]},
                    {Role::GradShard, b.gradients.shard(u)},
                    {Role::MuonUpdate, s.has_muon(u) ? b.muon.update(u) : -1}};
    opt.deps = gates;
    opt.deps.push_back(b.gradients.last_reduce(u));
    opt.deps.push_back(muon_done);
    // Reads grad, master and state; writes master, state and the param-dtype shard.
    opt.memory_bytes = f.shard_elems * (s.gbytes + 2 * s.mbytes + 2 * states * s.mbytes + s.pbytes);
    b.issue.emit(opt);
    std::vector<int> done = {s.has_muon(u) ? b.muon.update(u) : -1};
    if (!b.issue.buffer_at(b.gradients.shard(u)).persistent) done.push_back(b.gradients.shard(u));
    b.issue.free_now(done);
  }
}

}  // namespace fsdpgen::schedule_builder
