// Schedule: the step builder. One Builder walks micro-batches, forward
// segments, backward segments and the optimizer, issuing ops in order and
// tracking which units are gathered, which gradients await reduction, and
// which buffers are alive. Strategy semantics follow DESIGN §4:
//   sharded (shard group > 1): AG before use, RS after the unit's last backward
//   replicated (replicas > 1): AR of the reduced gradient over the replica group
//   free after forward (full_shard, hybrid_shard) vs kept until backward (ZeRO-2, no_shard)
#include "planner/Schedule.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "planner/Activations.h"
#include "planner/Flops.h"
#include "planner/Validation.h"

namespace fsdpgen {

int64_t Op::sent_bytes() const {
  if (group_size <= 1) return 0;
  int64_t ring = payload_bytes / group_size * (group_size - 1);
  if (kind == OpKind::AllReduce) return 2 * ring;
  if (kind == OpKind::AllGather || kind == OpKind::ReduceScatter) return ring;
  if (kind == OpKind::MuonGather || kind == OpKind::MuonScatter) return payload_bytes;
  return 0;
}

int Op::operand(Role role) const {
  for (const OpOperand& o : operands)
    if (o.role == role) return o.buffer;
  return -1;
}

std::string Op::label() const {
  std::string s(to_string(kind));
  if (unit >= 0) s += fmt::format(" u{}", unit);
  if (segment >= 0) s += fmt::format(" s{}", segment);
  if (micro_batch >= 0) s += fmt::format(" mb{}", micro_batch);
  if (is_loss_reduce()) s += " loss";
  return s;
}

int64_t Schedule::sent_bytes(OpKind kind) const {
  int64_t n = 0;
  for (const Op& op : ops)
    if (op.kind == kind) n += op.sent_bytes();
  return n;
}

namespace {

class Builder {
 public:
  Builder(const Units& units, const ScheduleOptions& options)
      : spec_(units.spec), p_(units.spec.parallel) {
    s_.units = units;
    s_.options = options;
    s_.micro_batch = options.micro_batch > 0 ? options.micro_batch : spec_.train.micro_batch;
    S_ = p_.shard_group;
    R_ = p_.replicas();
    M_ = p_.accumulate.micro_batches;
    sharded_ = S_ > 1;
    replicated_ = R_ > 1;
    offload_ = p_.offload == Offload::Cpu;
    free_after_forward_ = !keeps_params_through_backward(p_.sharding);
    recompute_ = p_.recompute == Recompute::Block;
    offload_acts_ = recompute_ && p_.offload_activations;
    pbytes_ = dtype_bytes(p_.precision.param);
    rbytes_ = dtype_bytes(unsharded_grad_dtype(p_));
    mbytes_ = dtype_bytes(p_.precision.master);
    gbytes_ = dtype_bytes(grad_shard_dtype(p_));
    act_ = {s_.micro_batch * spec_.model.context, pbytes_, options.flash_attention};
    const size_t n = units.units.size();
    shard_.assign(n, -1);
    master_.assign(n, -1);
    state_.assign(n, -1);
    grad_shard_.assign(n, -1);
    gathered_.assign(n, -1);
    gather_op_.assign(n, -1);
    grads_.assign(n, -1);
    last_reduce_.assign(n, -1);
    muon_gathered_.assign(n, -1);
    muon_update_.assign(n, -1);
    muon_gather_op_.assign(n, -1);
    muon_ = spec_.train.optimizer.kind == OptimizerKind::Muon;
    if (muon_) s_.muon = plan_muon(units, spec_.train.optimizer.ns_steps);
  }

  Schedule run() {
    persistent_buffers();
    for (int64_t mb = 0; mb < M_; ++mb) {
      forward(static_cast<int>(mb));
      backward(static_cast<int>(mb));
    }
    optimizer();
    return std::move(s_);
  }

 private:
  const std::vector<FlatUnit>& units() const { return s_.units.units; }
  const std::vector<Segment>& segments() const { return s_.units.segments; }
  int64_t unit_bytes(int u, int64_t elem_bytes) const {
    return units()[u].padded_elems * elem_bytes;
  }
  int64_t shard_bytes(int u, int64_t elem_bytes) const {
    return units()[u].shard_elems * elem_bytes;
  }
  bool has_params(int u) const { return units()[u].padded_elems > 0; }
  // Shard-sized optimizer state buffers per unit: AdamW's m and v (muon: its
  // nested AdamW's), SGD's momentum.
  int64_t optimizer_states() const {
    const OptimizerSpec& o = spec_.train.optimizer;
    return o.kind != OptimizerKind::Sgd ? 2 : (o.momentum > 0 ? 1 : 0);
  }
  // Params must be brought in before compute: gathered, or copied from the host.
  bool needs_gather(int u) const { return has_params(u) && (sharded_ || offload_); }

  int buffer(BufferKind kind, MemSpace space, std::string name, int64_t bytes, int unit, int mb,
             bool persistent) {
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

  // Appends an op in issue order. A first use of a non-persistent buffer on a
  // stream other than compute waits for the last compute op issued, so that
  // it comes after every Free issued before it (see Schedule.h).
  int emit(Op op) {
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

  // A Free on the compute stream after every use of the buffers on other streams.
  void free_now(std::vector<int> bufs) {
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

  void persistent_buffers() {
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
      workspace_bytes =
          std::max(workspace_bytes, cudnn_attention_workspace_bytes(spec_.model, act_));
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

  // A checkpoint is written from a host copy taken at the step boundary, so
  // that the next steps run while it is written: per unit the fp32 weights
  // and optimizer state of this rank's shard, as runtime/checkpoint.cpp's
  // shard file lays them out (4 bytes per element whatever the dtypes).
  void checkpoint_staging() {
    const CheckpointSpec& ck = spec_.train.checkpoint;
    if (!ck.enabled || ck.every <= 0) return;
    const int64_t states = optimizer_states();
    int64_t bytes = 0;
    for (const FlatUnit& u : units())
      if (has_params(u.index)) bytes += (1 + states) * shard_bytes(u.index, 4);
    buffer(BufferKind::CheckpointStaging, MemSpace::Host, "checkpoint_staging", bytes, -1, -1,
           true);
  }

  static Op make_op(OpKind kind, StreamId stream, int unit, int segment, int mb) {
    Op op;
    op.kind = kind;
    op.stream = stream;
    op.unit = unit;
    op.segment = segment;
    op.micro_batch = mb;
    return op;
  }
  Op collective(OpKind kind, StreamId stream, int unit, int mb, CommGroup group, int64_t size,
                int64_t payload) {
    Op op = make_op(kind, stream, unit, -1, mb);
    op.group = group;
    op.group_size = size;
    op.payload_bytes = payload;
    return op;
  }

  int params_of(int u) const { return needs_gather(u) ? gathered_[u] : shard_[u]; }

  int alive_gathered_blocks() const {
    int n = 0;
    for (size_t u = 1; u < gathered_.size(); ++u)
      n += gathered_[u] >= 0;
    return n;
  }

  void gather(int u, const char* phase, int mb) {
    if (!needs_gather(u) || gathered_[u] >= 0) return;
    // The host-copy staging of the previous gather is done once its all-gather is.
    free_now(gather_pending_);
    gather_pending_.clear();
    int src = shard_[u];
    int dst = buffer(BufferKind::UnshardedParams, MemSpace::Device,
                     fmt::format("params.u{}.{}.mb{}", u, phase, mb), unit_bytes(u, pbytes_), u, mb,
                     false);
    int h2d = -1, staging = -1;
    if (offload_) {
      Op copy = make_op(OpKind::CopyH2D, StreamId::Copy, u, -1, mb);
      copy.payload_bytes = shard_bytes(u, pbytes_);
      if (sharded_) {
        staging = buffer(BufferKind::CommStaging, MemSpace::Device,
                         fmt::format("h2d.u{}.{}.mb{}", u, phase, mb), shard_bytes(u, pbytes_), u,
                         mb, false);
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

  void release_params(int u) {
    if (!needs_gather(u) || gathered_[u] < 0) return;
    free_now({gathered_[u]});
    gathered_[u] = -1;
  }

  // Prefetches the next units that `order` (segment indices) will use after
  // position `pos`, at most max_inflight - 1 ahead; strategies that free after
  // forward also keep the gathered blocks within max_inflight.
  void prefetch(const std::vector<int>& order, size_t pos, const char* phase, int mb) {
    int window = static_cast<int>(p_.prefetch.max_inflight) - 1;
    int current = segments()[order[pos]].unit;
    std::vector<int> ahead;
    for (size_t k = pos + 1; k < order.size() && static_cast<int>(ahead.size()) < window; ++k) {
      int v = segments()[order[k]].unit;
      if (v == current || v == 0 || std::find(ahead.begin(), ahead.end(), v) != ahead.end())
        continue;
      ahead.push_back(v);
    }
    for (int v : ahead) {
      if (gathered_[v] >= 0 || !needs_gather(v)) continue;
      if (free_after_forward_ && alive_gathered_blocks() >= p_.prefetch.max_inflight) break;
      gather(v, phase, mb);
    }
  }

  // What group g (Segment::group) saves: all its layers' slots, or under
  // recompute = block only its first layer's input.
  bool recomputes(int seg) const { return recompute_ && segments()[seg].unit != 0; }
  int64_t saved_bytes(int g) const {
    if (recomputes(g)) return segment_input_bytes(spec_.model, act_);
    return group_saved_bytes(s_.units, g, act_);
  }
  bool last_of_group(int i) const {
    return i + 1 == static_cast<int>(segments().size()) ||
           segments()[i + 1].group != segments()[i].group;
  }
  // A recompute of segment i rebuilds something: not when it is only its
  // block's last piece, whose forward writes just the block's output.
  bool recompute_rebuilds(int i) const {
    const Segment& seg = segments()[i];
    const LayerId& l = seg.layers.front();
    return !(last_of_group(i) && seg.layers.size() == 1 &&
             writes_only_block_output(spec_.model, l));
  }

  void forward(int mb) {
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
        acts_[i + 1] = buffer(BufferKind::Activations, MemSpace::Device,
                              fmt::format("acts.s{}.mb{}", i + 1, mb), saved_bytes(i + 1),
                              segments()[i + 1].unit, mb, false);
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

  // offload activations: group g's saved input (a block's, kept for
  // recompute) goes to host memory once the group's forward is done with it;
  // the device copy is freed when the copy is done.
  void offload_saved(int g, int mb, int forward_op) {
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

  // ...and comes back into a device buffer of its own before its backward
  // (issued one group ahead, as backward prefetch issues the gathers).
  void fetch_saved(int g, int mb) {
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

  bool last_forward_segment(int i) const {
    for (size_t k = i + 1; k < segments().size(); ++k)
      if (segments()[k].unit == segments()[i].unit) return false;
    return true;
  }
  bool first_forward_segment(int i) const {
    for (int k = 0; k < i; ++k)
      if (segments()[k].unit == segments()[i].unit) return false;
    return true;
  }

  // One compute op of backward in issue order: segment `segment`'s
  // backward, or (recompute = block) its forward again.
  struct Use {
    int segment;
    bool recompute;
  };
  // Backward's uses: segments in reverse; under recompute = block, before
  // the backward of a group's last segment, its segments' recomputes in
  // forward order.
  std::vector<Use> backward_uses() const {
    std::vector<Use> uses;
    for (int i = static_cast<int>(segments().size()) - 1; i >= 0; --i) {
      if (recomputes(i) && last_of_group(i))
        for (int j : group_segments(s_.units, segments()[i].group))
          if (recompute_rebuilds(j)) uses.push_back({j, true});
      uses.push_back({i, false});
    }
    return uses;
  }

  // A custom layer writes its output even when recomputed (into the backward
  // scratch's custom_out, planner/Activations.h).
  void recompute(int j, int mb, int rscratch, int scratch) {
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

  void backward(int mb) {
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
        bool per_step =
            p_.accumulate.reduce == AccumulateReduce::Last || !(sharded_ || replicated_);
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

  // Gradient reduction of unit u after its last backward in micro-batch mb.
  void reduce(int u, int mb, int last_backward) {
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
                                    fmt::format("rs_out.u{}.mb{}", u, mb), shard_bytes(u, rbytes_),
                                    u, mb, false)
                           : -1;
      Op rs = collective(OpKind::ReduceScatter, StreamId::ReduceScatter, u, mb, CommGroup::Shard,
                         S_, unit_bytes(u, rbytes_));
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

  bool has_muon(int u) const { return muon_ && !s_.muon.matrices[u].empty(); }

  // Muon, shard group > 1: unit u's owners gather their matrices' reduced
  // gradients from the shards that hold them.
  void muon_gather(int u) {
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

  // Muon: unit u's owners orthogonalize their matrices once the step's gate
  // (the norm, the guard's loss) is known, and send each shard its updates.
  // Returns the op the unit's optimizer step waits for.
  int muon_orthogonalize(int u, const std::vector<int>& gates) {
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

  void optimizer() {
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
      Op loss = collective(OpKind::AllReduce, StreamId::AllReduce, -1, -1, CommGroup::World,
                           p_.world, 4 * p_.world);
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

  const Spec& spec_;
  const ParallelSpec& p_;
  Schedule s_;
  int64_t S_ = 1, R_ = 1, M_ = 1;
  bool sharded_ = false, replicated_ = false, offload_ = false, free_after_forward_ = true,
       recompute_ = false, offload_acts_ = false;
  int64_t pbytes_ = 4, rbytes_ = 4, mbytes_ = 4, gbytes_ = 4;
  ActivationShape act_;
  std::vector<int> shard_, master_, state_, grad_shard_;  // per unit
  bool muon_ = false;                                     // optimizer = muon(...)
  int muon_momentum_ = -1, muon_workspace_ = -1;
  std::vector<int> muon_gathered_, muon_update_, muon_gather_op_;  // per unit
  int loss_forward_ = -1;  // the last forward op that computes losses
  std::vector<int> gathered_, gather_op_, grads_, last_reduce_;
  std::vector<std::vector<int>> users_;  // per buffer, ops that used it
  std::vector<int> pending_;             // frees waiting for a gradient reduction
  std::vector<int> gather_pending_;      // host-copy staging waiting for its all-gather
  std::vector<int> acts_;                // per segment, current micro-batch
  std::vector<int> host_acts_;           // offloaded: per segment, the saved input on the host
  std::vector<int> fetch_op_;            // offloaded: per segment, the copy bringing it back
  int inputs_ = -1, logits_ = -1, workspace_ = -1, rope_ = -1;
  int last_compute_ = -1;
};

std::string deps_text(const Op& op) {
  if (op.deps.empty()) return "-";
  std::vector<std::string> d;
  for (int x : op.deps)
    d.push_back(fmt::format("#{}", x));
  return fmt::format("{}", fmt::join(d, " "));
}

}  // namespace

DType unsharded_grad_dtype(const ParallelSpec& p) {
  return p.shard_group > 1 || p.replicas() > 1 ? p.precision.reduce : DType::FP32;
}

DType grad_shard_dtype(const ParallelSpec& p) {
  return p.accumulate.micro_batches > 1 || p.offload == Offload::Cpu ? DType::FP32
                                                                     : unsharded_grad_dtype(p);
}

Schedule build_schedule(const Units& units, const ScheduleOptions& options) {
  return Builder(units, options).run();
}

bool runs_on_host(const Schedule& s, const Op& op) {
  if (s.units.spec.parallel.offload != Offload::Cpu) return false;
  if (op.stream == StreamId::Host) return true;
  if (op.group == CommGroup::None) return false;
  for (int b : op.uses)
    if (s.buffers[static_cast<size_t>(b)].space == MemSpace::Device) return false;
  return true;  // no buffer at all: the norm's partial sums, which the host stream holds
}

std::string print_schedule(const Schedule& s) {
  const Spec& spec = s.units.spec;
  const ParallelSpec& p = spec.parallel;
  std::string out = fmt::format(
      "schedule of {}: {}, world {} (shard group {}, {} replica{}), {} micro-batch{} of {} x {} "
      "tokens per rank\n",
      spec.model.name, to_string(p.sharding), p.world, p.shard_group, p.replicas(),
      p.replicas() == 1 ? "" : "s", p.accumulate.micro_batches,
      p.accumulate.micro_batches == 1 ? "" : "es", s.micro_batch, spec.model.context);
  out += fmt::format(
      "prefetch forward={} backward={} max_inflight={}, recompute={}, offload={}, accumulate "
      "reduce={}\n",
      p.prefetch.forward, to_string(p.prefetch.backward), p.prefetch.max_inflight,
      to_string(p.recompute),
      fmt::format("{}{}", to_string(p.offload), p.offload_activations ? "+activations" : ""),
      to_string(p.accumulate.reduce));
  out += fmt::format(
      "{} ops, {} buffers; bytes sent per rank: all-gather {}, reduce-scatter {}, all-reduce {}\n",
      s.ops.size(), s.buffers.size(), s.sent_bytes(OpKind::AllGather),
      s.sent_bytes(OpKind::ReduceScatter), s.sent_bytes(OpKind::AllReduce));
  out += describe_validation_pass(s) + "\n";
  for (size_t st = 0; st < kStreamNames.size(); ++st) {
    std::vector<const Op*> ops;
    for (const Op& op : s.ops)
      if (static_cast<size_t>(op.stream) == st) ops.push_back(&op);
    if (ops.empty()) continue;
    out += fmt::format("stream {} ({} ops):\n", kStreamNames[st], ops.size());
    for (const Op* op : ops) {
      std::string what;
      if (op->group != CommGroup::None)
        what = fmt::format("{} B over {} x{}", op->payload_bytes, to_string(op->group),
                           op->group_size);
      else if (op->kind == OpKind::CopyH2D || op->kind == OpKind::CopyD2H)
        what = fmt::format("{} B", op->payload_bytes);
      else if (op->kind == OpKind::Free) {
        std::vector<std::string> names;
        for (int b : op->frees)
          names.push_back(s.buffers[b].name);
        what = fmt::format("{}", fmt::join(names, " "));
      } else if (op->flops > 0)
        what = fmt::format("{:.4g} flop", op->flops);
      else if (op->memory_bytes > 0)
        what = fmt::format("{} B memory", op->memory_bytes);
      out += fmt::format("  #{:<5} {:<20} {:<44} deps {}\n", op->id, op->label(), what,
                         deps_text(*op));
    }
  }
  return out;
}

nlohmann::ordered_json op_json(const Op& op) {
  return {{"op", op.id},
          {"kind", std::string(to_string(op.kind))},
          {"unit", op.unit},
          {"segment", op.segment},
          {"micro_batch", op.micro_batch},
          {"group", std::string(to_string(op.group))},
          {"group_size", op.group_size},
          {"payload_bytes", op.payload_bytes},
          {"sent_bytes", op.sent_bytes()},
          {"memory_bytes", op.memory_bytes},
          {"flops", op.flops},
          {"deps", op.deps}};
}

std::string schedule_json(const Schedule& s) {
  using nlohmann::ordered_json;
  const Spec& spec = s.units.spec;
  ordered_json j;
  j["model"] = spec.model.name;
  j["sharding"] = std::string(to_string(spec.parallel.sharding));
  j["world"] = spec.parallel.world;
  j["shard_group"] = spec.parallel.shard_group;
  j["replicas"] = spec.parallel.replicas();
  j["micro_batches"] = spec.parallel.accumulate.micro_batches;
  j["micro_batch"] = s.micro_batch;
  j["context"] = spec.model.context;
  j["streams"] = ordered_json::array();
  for (std::string_view n : kStreamNames)
    j["streams"].push_back(std::string(n));
  j["units"] = ordered_json::array();
  for (const FlatUnit& u : s.units.units)
    j["units"].push_back({{"index", u.index},
                          {"name", u.name},
                          {"param_elems", u.param_elems},
                          {"padded_elems", u.padded_elems},
                          {"shard_elems", u.shard_elems}});
  j["buffers"] = ordered_json::array();
  for (const Buffer& b : s.buffers)
    j["buffers"].push_back({{"id", b.id},
                            {"name", b.name},
                            {"kind", std::string(to_string(b.kind))},
                            {"space", b.space == MemSpace::Device ? "device" : "host"},
                            {"bytes", b.bytes},
                            {"unit", b.unit},
                            {"micro_batch", b.micro_batch},
                            {"persistent", b.persistent}});
  j["ops"] = ordered_json::array();
  for (const Op& op : s.ops) {
    ordered_json o = op_json(op);
    o["stream"] = std::string(to_string(op.stream));
    o["uses"] = op.uses;
    o["frees"] = op.frees;
    j["ops"].push_back(o);
  }
  return j.dump(1) + "\n";
}

}  // namespace fsdpgen
