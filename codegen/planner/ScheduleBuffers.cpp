// ScheduleBuffers: the Builder's buffers and op issuing (codegen/planner/ScheduleBuilder.h):
// persistent buffers, checkpoint staging, frees after last use, collectives.
#include "codegen/planner/ScheduleBuilder.h"

#include <algorithm>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"

namespace fsdpgen::schedule_builder {

int Builder::buffer(BufferKind kind, MemSpace space, std::string name, int64_t bytes, int unit,
                    int mb, bool persistent) {
  if (bytes <= 0) return -1;
  Buffer b{static_cast<int>(s_.buffers.size()),
           kind,
           space,
           std::move(name),
           bytes,
           unit,
           mb,
           persistent};
  s_.buffers.push_back(b);
  users_.emplace_back();
  return b.id;
}

int Builder::emit(Op op) {
  op.id = static_cast<int>(s_.ops.size());
  op.operands.erase(std::remove_if(op.operands.begin(), op.operands.end(),
                                   [](const OpOperand& o) { return o.buffer < 0; }),
                    op.operands.end());
  for (const OpOperand& o : op.operands)
    op.uses.push_back(o.buffer);
  for (int b : op.uses) {
    if (users_[b].empty() && !s_.buffers[b].persistent && op.stream != StreamId::Compute &&
        last_compute_ >= 0)
      op.deps.push_back(last_compute_);
    users_[b].push_back(op.id);
  }
  op.deps.erase(std::remove_if(op.deps.begin(), op.deps.end(),
                               [&](int d) { return d < 0 || s_.ops[d].stream == op.stream; }),
                op.deps.end());
  std::sort(op.deps.begin(), op.deps.end());
  op.deps.erase(std::unique(op.deps.begin(), op.deps.end()), op.deps.end());
  if (op.stream == StreamId::Compute) last_compute_ = op.id;
  s_.ops.push_back(op);
  return op.id;
}

void Builder::free_now(std::vector<int> bufs) {
  bufs.erase(std::remove(bufs.begin(), bufs.end(), -1), bufs.end());
  if (bufs.empty()) return;
  Op op;
  op.kind = OpKind::Free;
  op.stream = StreamId::Compute;
  for (int b : bufs)
    for (int u : users_[b])
      op.deps.push_back(u);
  op.frees = bufs;
  emit(op);
}

void Builder::persistent_buffers() {
  MemSpace home = offload_ ? MemSpace::Host : MemSpace::Device;
  for (const FlatUnit& u : units()) {
    if (!has_params(u.index)) continue;
    int i = u.index;
    shard_[i] = buffer(BufferKind::ParamShard, home, fmt::format("param_shard.u{}", i),
                       shard_bytes(i, pbytes_), i, -1, true);
    if (p_.precision.master != p_.precision.param)
      master_[i] = buffer(BufferKind::MasterWeights, home, fmt::format("master.u{}", i),
                          shard_bytes(i, mbytes_), i, -1, true);
    // Muon: AdamW's m and v for the shard's elements that are no Muon
    // matrix's, compacted (runtime/muon.h's muon_shard_parts).
    const int64_t state_elems =
        muon_ ? muon_unit(s_.muon, i, u.shard_elems, S_).adamw_elems : u.shard_elems;
    state_[i] = buffer(BufferKind::OptimizerState, home, fmt::format("optimizer.u{}", i),
                       optimizer_states() * state_elems * mbytes_, i, -1, true);
    if (offload_)
      grad_shard_[i] =
          buffer(BufferKind::GradShard, MemSpace::Host, fmt::format("grad_shard.u{}", i),
                 shard_bytes(i, gbytes_), i, -1, true);
  }
  int64_t workspace_bytes = s_.options.gemm_workspace_bytes;
  if (s_.options.cudnn_attention_workspace)
    workspace_bytes = std::max(workspace_bytes, cudnn_attention_workspace_bytes(spec_.model, act_));
  workspace_ = buffer(BufferKind::Workspace, MemSpace::Device, "gemm_workspace", workspace_bytes,
                      -1, -1, true);
  if (muon_) {
    const MuonMemory m = muon_memory(s_.muon, S_, gbytes_);
    muon_momentum_ = buffer(BufferKind::MuonMomentum, MemSpace::Device, "muon_momentum",
                            m.momentum_bytes, -1, -1, true);
    muon_workspace_ = buffer(BufferKind::MuonWorkspace, MemSpace::Device, "muon_workspace",
                             m.workspace_bytes, -1, -1, true);
  }
  if (const int64_t rope_bytes = rope_tables_bytes(spec_.model); rope_bytes > 0)
    rope_ =
        buffer(BufferKind::RopeTables, MemSpace::Device, "rope_tables", rope_bytes, -1, -1, true);
  checkpoint_staging();
}

void Builder::checkpoint_staging() {
  const CheckpointSpec& ck = spec_.train.checkpoint;
  if (!ck.enabled || ck.every <= 0) return;
  const int64_t states = optimizer_states();
  int64_t bytes = 0;
  for (const FlatUnit& u : units())
    if (has_params(u.index)) bytes += (1 + states) * shard_bytes(u.index, 4);
  buffer(BufferKind::CheckpointStaging, MemSpace::Host, "checkpoint_staging", bytes, -1, -1, true);
}

Op Builder::make_op(OpKind kind, StreamId stream, int unit, int segment, int mb) {
  Op op;
  op.kind = kind;
  op.stream = stream;
  op.unit = unit;
  op.segment = segment;
  op.micro_batch = mb;
  return op;
}

Op Builder::collective(OpKind kind, StreamId stream, int unit, int mb, CommGroup group,
                       int64_t size, int64_t payload) {
  Op op = make_op(kind, stream, unit, -1, mb);
  op.group = group;
  op.group_size = size;
  op.payload_bytes = payload;
  return op;
}

}  // namespace fsdpgen::schedule_builder
