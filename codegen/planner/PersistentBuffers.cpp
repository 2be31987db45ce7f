// PersistentBuffers: the step's buffers that outlive it, and the
// checkpoint's host copy.
#include "codegen/planner/PersistentBuffers.h"

#include <algorithm>

#include <fmt/format.h>

namespace fsdpgen::schedule_builder {
namespace {

// A checkpoint is written from a host copy taken at the step boundary, so
// that the next steps run while it is written: per unit the fp32 weights
// and optimizer state of this rank's shard, as runtime/train/checkpoint.cpp's
// shard file lays them out (4 bytes per element whatever the dtypes).
void checkpoint_staging(const StepShape& s, IssueOrder& issue) {
  const CheckpointSpec& ck = s.spec.train.checkpoint;
  if (!ck.enabled || ck.every <= 0) return;
  const int64_t states = s.optimizer_states();
  int64_t bytes = 0;
  for (const FlatUnit& u : s.units())
    if (s.has_params(u.index)) bytes += (1 + states) * s.shard_bytes(u.index, 4);
  issue.buffer(BufferKind::CheckpointStaging, MemSpace::Host, "checkpoint_staging", bytes, -1, -1,
               true);
}

}  // namespace

PersistentBuffers persistent_buffers(const StepShape& s, IssueOrder& issue, Gradients& gradients) {
  PersistentBuffers b;
  const size_t n = s.units().size();
  b.shard.assign(n, -1);
  b.master.assign(n, -1);
  b.state.assign(n, -1);
  MemSpace home = s.offload ? MemSpace::Host : MemSpace::Device;
  for (const FlatUnit& u : s.units()) {
    if (!s.has_params(u.index)) continue;
    int i = u.index;
    b.shard[i] = issue.buffer(BufferKind::ParamShard, home, fmt::format("param_shard.u{}", i),
                              s.shard_bytes(i, s.pbytes), i, -1, true);
    if (s.p.precision.master != s.p.precision.param)
      b.master[i] = issue.buffer(BufferKind::MasterWeights, home, fmt::format("master.u{}", i),
                                 s.shard_bytes(i, s.mbytes), i, -1, true);
    // Muon: AdamW's m and v for the shard's elements that are no Muon
    // matrix's, compacted (runtime/cpu/muon.h's muon_shard_parts).
    const int64_t state_elems =
        s.muon ? muon_unit(s.muon_plan, i, u.shard_elems, s.S).adamw_elems : u.shard_elems;
    b.state[i] = issue.buffer(BufferKind::OptimizerState, home, fmt::format("optimizer.u{}", i),
                              s.optimizer_states() * state_elems * s.mbytes, i, -1, true);
    if (s.offload)
      gradients.set_host_shard(
          i, issue.buffer(BufferKind::GradShard, MemSpace::Host, fmt::format("grad_shard.u{}", i),
                          s.shard_bytes(i, s.gbytes), i, -1, true));
  }
  int64_t workspace_bytes = s.options.gemm_workspace_bytes;
  if (s.options.cudnn_attention_workspace)
    workspace_bytes =
        std::max(workspace_bytes, cudnn_attention_workspace_bytes(s.spec.model, s.act));
  b.workspace = issue.buffer(BufferKind::Workspace, MemSpace::Device, "gemm_workspace",
                             workspace_bytes, -1, -1, true);
  if (s.muon) {
    const MuonMemory m = muon_memory(s.muon_plan, s.S, s.gbytes);
    b.muon_momentum = issue.buffer(BufferKind::MuonMomentum, MemSpace::Device, "muon_momentum",
                                   m.momentum_bytes, -1, -1, true);
    b.muon_workspace = issue.buffer(BufferKind::MuonWorkspace, MemSpace::Device, "muon_workspace",
                                    m.workspace_bytes, -1, -1, true);
  }
  if (const int64_t rope_bytes = rope_tables_bytes(s.spec.model); rope_bytes > 0)
    b.rope = issue.buffer(BufferKind::RopeTables, MemSpace::Device, "rope_tables", rope_bytes, -1,
                          -1, true);
  checkpoint_staging(s, issue);
  return b;
}

}  // namespace fsdpgen::schedule_builder
