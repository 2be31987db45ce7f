// ScheduleBuilder: the step builder behind build_schedule (codegen/planner/Schedule.h),
// private to the planner. One Builder walks micro-batches, forward segments,
// backward segments and the optimizer, issuing ops in order and tracking which
// units are gathered, which gradients await reduction, and which buffers are
// alive. Its phases are defined in ScheduleBuffers.cpp, ScheduleForward.cpp,
// ScheduleBackward.cpp and ScheduleOptimizer.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Schedule.h"

namespace fsdpgen::schedule_builder {

class Builder {
 public:
  Builder(const Units& units, const ScheduleOptions& options)
      : spec_(units.spec), p_(units.spec.parallel) {
    s_.units = units;
    s_.options = options;
    s_.micro_batch = spec_.train.micro_batch;
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
             bool persistent);

  // Appends an op in issue order. A first use of a non-persistent buffer on a
  // stream other than compute waits for the last compute op issued, so that
  // it comes after every Free issued before it (see Schedule.h).
  int emit(Op op);

  // A Free on the compute stream after every use of the buffers on other streams.
  void free_now(std::vector<int> bufs);

  void persistent_buffers();

  // A checkpoint is written from a host copy taken at the step boundary, so
  // that the next steps run while it is written: per unit the fp32 weights
  // and optimizer state of this rank's shard, as runtime/checkpoint.cpp's
  // shard file lays them out (4 bytes per element whatever the dtypes).
  void checkpoint_staging();

  static Op make_op(OpKind kind, StreamId stream, int unit, int segment, int mb);
  Op collective(OpKind kind, StreamId stream, int unit, int mb, CommGroup group, int64_t size,
                int64_t payload);

  int params_of(int u) const { return needs_gather(u) ? gathered_[u] : shard_[u]; }

  int alive_gathered_blocks() const;

  void gather(int u, const char* phase, int mb);

  void release_params(int u);

  // Prefetches the next units that `order` (segment indices) will use after
  // position `pos`, at most max_inflight - 1 ahead; strategies that free after
  // forward also keep the gathered blocks within max_inflight.
  void prefetch(const std::vector<int>& order, size_t pos, const char* phase, int mb);

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
  bool recompute_rebuilds(int i) const;

  void forward(int mb);

  // offload activations: group g's saved input (a block's, kept for
  // recompute) goes to host memory once the group's forward is done with it;
  // the device copy is freed when the copy is done.
  void offload_saved(int g, int mb, int forward_op);

  // ...and comes back into a device buffer of its own before its backward
  // (issued one group ahead, as backward prefetch issues the gathers).
  void fetch_saved(int g, int mb);

  bool last_forward_segment(int i) const;
  bool first_forward_segment(int i) const;

  // One compute op of backward in issue order: segment `segment`'s
  // backward, or (recompute = block) its forward again.
  struct Use {
    int segment;
    bool recompute;
  };
  // Backward's uses: segments in reverse; under recompute = block, before
  // the backward of a group's last segment, its segments' recomputes in
  // forward order.
  std::vector<Use> backward_uses() const;

  // A custom layer writes its output even when recomputed (into the backward
  // scratch's custom_out, codegen/planner/Activations.h).
  void recompute(int j, int mb, int rscratch, int scratch);

  void backward(int mb);

  // Gradient reduction of unit u after its last backward in micro-batch mb.
  void reduce(int u, int mb, int last_backward);

  bool has_muon(int u) const { return muon_ && !s_.muon.matrices[u].empty(); }

  // Muon, shard group > 1: unit u's owners gather their matrices' reduced
  // gradients from the shards that hold them.
  void muon_gather(int u);

  // Muon: unit u's owners orthogonalize their matrices once the step's gate
  // (the norm, the guard's loss) is known, and send each shard its updates.
  // Returns the op the unit's optimizer step waits for.
  int muon_orthogonalize(int u, const std::vector<int>& gates);

  void optimizer();

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

}  // namespace fsdpgen::schedule_builder
