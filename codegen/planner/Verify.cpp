// Verify: invariant checks over a schedule and its memory plan.
#include "codegen/planner/Verify.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "codegen/planner/Validation.h"

namespace fsdpgen {
namespace {

class Verifier {
 public:
  Verifier(const Schedule& s, const MemoryPlan& m) : s_(s), m_(m) {
    freed_at_.assign(s.buffers.size(), -1);
    for (const Op& op : s.ops)
      for (int b : op.frees)
        freed_at_[b] = op.id;
  }

  std::vector<std::string> run() {
    deps_point_backwards();
    gathers_precede_and_frees_follow();
    reductions_follow_backward();
    inflight_bound();
    memory_disjoint_and_ordered();
    peak_breakdown();
    group_sizes_match();
    hybrid_all_reduce_once();
    device_never_waits_for_the_host();
    validation_is_a_forward_pass();
    muon_is_planned();
    return errors_;
  }

 private:
  template <class... Args>
  void fail(fmt::format_string<Args...> f, Args&&... args) {
    if (errors_.size() < 50) errors_.push_back(fmt::format(f, std::forward<Args>(args)...));
  }

  bool is_compute(const Op& op) const {
    return op.kind == OpKind::Forward || op.kind == OpKind::Backward ||
           op.kind == OpKind::Recompute;
  }
  bool has_dep(const Op& op, int d) const {
    return std::find(op.deps.begin(), op.deps.end(), d) != op.deps.end();
  }

  // The validation pass (codegen/planner/Validation.h) runs the step's prefix alone.
  void validation_is_a_forward_pass() {
    if (const std::string why = validation_pass_problem(s_); !why.empty()) fail("{}", why);
  }

  void deps_point_backwards() {
    for (const Op& op : s_.ops)
      for (int d : op.deps)
        if (d < 0 || d >= op.id)
          fail("op #{} ({}) depends on #{}, which is not issued before it", op.id, op.label(), d);
  }

  void gathers_precede_and_frees_follow() {
    std::map<int, int> producer;  // unsharded param buffer -> AG or H2D that fills it
    for (const Op& op : s_.ops)
      if (op.kind == OpKind::AllGather || op.kind == OpKind::CopyH2D)
        for (int b : op.uses)
          if (s_.buffers[b].kind == BufferKind::UnshardedParams) producer[b] = op.id;
    for (const Op& op : s_.ops) {
      if (!is_compute(op)) continue;
      for (int b : op.uses) {
        if (s_.buffers[b].kind != BufferKind::UnshardedParams) continue;
        auto it = producer.find(b);
        if (it == producer.end() || it->second > op.id)
          fail("{} (#{}) uses {} before any all-gather fills it", op.label(), op.id,
               s_.buffers[b].name);
        else if (s_.ops[it->second].stream != op.stream && !has_dep(op, it->second))
          fail("{} (#{}) does not wait for the all-gather #{} of {}", op.label(), op.id, it->second,
               s_.buffers[b].name);
        if (s_.buffers[b].unit != op.unit)
          fail("{} (#{}) computes unit {} with the params of unit {}", op.label(), op.id, op.unit,
               s_.buffers[b].unit);
        if (freed_at_[b] >= 0 && freed_at_[b] < op.id)
          fail("{} (#{}) uses {} after its free #{}", op.label(), op.id, s_.buffers[b].name,
               freed_at_[b]);
      }
    }
    for (const Buffer& b : s_.buffers)
      if (b.kind == BufferKind::UnshardedParams && freed_at_[b.id] < 0)
        fail("unsharded params {} are never freed", b.name);
  }

  void reductions_follow_backward() {
    const AccumulateReduce mode = s_.units.spec.parallel.accumulate.reduce;
    for (const Op& rs : s_.ops) {
      if (rs.kind != OpKind::ReduceScatter) continue;
      int last_b = -1;
      for (const Op& b : s_.ops)
        if (b.kind == OpKind::Backward && b.unit == rs.unit &&
            (mode == AccumulateReduce::Last || b.micro_batch == rs.micro_batch))
          last_b = std::max(last_b, b.id);
      if (last_b < 0 || last_b > rs.id)
        fail("{} (#{}) is issued before the last backward of unit {} (#{})", rs.label(), rs.id,
             rs.unit, last_b);
      else if (!has_dep(rs, last_b))
        fail("{} (#{}) does not wait for the last backward #{} that writes its gradients",
             rs.label(), rs.id, last_b);
    }
  }

  void inflight_bound() {
    const ParallelSpec& p = s_.units.spec.parallel;
    if (keeps_params_through_backward(p.sharding))
      return;  // ZeRO-2 keeps every unit gathered by design
    int live = 0;
    for (const Op& op : s_.ops) {
      for (int b : op.frees)
        if (s_.buffers[b].kind == BufferKind::UnshardedParams && s_.buffers[b].unit != 0) --live;
      if (op.kind == OpKind::AllGather || op.kind == OpKind::CopyH2D)
        for (int b : op.uses)
          if (s_.buffers[b].kind == BufferKind::UnshardedParams && s_.buffers[b].unit != 0) ++live;
      if (live > p.prefetch.max_inflight)
        fail("{} unsharded units alive at op #{} ({}), more than max_inflight {}", live, op.id,
             op.label(), p.prefetch.max_inflight);
    }
  }

  void memory_disjoint_and_ordered() {
    const auto& pl = m_.placements;
    std::vector<int> device;
    for (const Buffer& b : s_.buffers)
      if (b.space == MemSpace::Device) device.push_back(b.id);
    std::sort(device.begin(), device.end(),
              [&](int a, int b) { return pl[a].offset < pl[b].offset; });
    for (size_t i = 0; i < device.size(); ++i) {
      const int a = device[i];
      const int64_t a_end = pl[a].offset + s_.buffers[a].bytes;
      if (a_end > m_.device_arena_bytes) fail("buffer {} ends past the arena", s_.buffers[a].name);
      for (size_t j = i + 1; j < device.size() && pl[device[j]].offset < a_end; ++j) {
        const int b = device[j];
        bool live_together = pl[a].first_op <= pl[b].last_op && pl[b].first_op <= pl[a].last_op;
        if (live_together) {
          fail("buffers {} and {} share bytes while both are alive", s_.buffers[a].name,
               s_.buffers[b].name);
          continue;
        }
        // The later buffer's first use must be ordered after the earlier one's Free.
        int early = pl[a].last_op < pl[b].first_op ? a : b, late = early == a ? b : a;
        const int free_op = pl[early].last_op;
        const Op& first = s_.ops[pl[late].first_op];
        bool ordered = first.stream == StreamId::Compute;
        for (int d : first.deps)
          ordered |= s_.ops[d].stream == StreamId::Compute && d >= free_op;
        if (!ordered)
          fail(
              "{} reuses the bytes of {} but its first use #{} is not ordered after that buffer's "
              "free #{}",
              s_.buffers[late].name, s_.buffers[early].name, first.id, free_op);
      }
    }
  }

  void peak_breakdown() {
    int64_t sum = 0;
    for (int64_t v : m_.peak_by_kind)
      sum += v;
    if (sum != m_.live_peak_bytes)
      fail("peak breakdown sums to {} B, but the live peak is {} B", sum, m_.live_peak_bytes);
    if (m_.device_arena_bytes < m_.live_peak_bytes)
      fail("device arena {} B is smaller than the live peak {} B", m_.device_arena_bytes,
           m_.live_peak_bytes);
  }

  // Every rank runs this one op list, so every member of a communicator
  // issues the same collectives in the same order by construction (and the
  // binaries agree on a hash of the schedule before the first step); what
  // can still disagree is a collective's group size and its group's.
  void group_sizes_match() {
    const ParallelSpec& p = s_.units.spec.parallel;
    for (const Op& op : s_.ops) {
      int64_t want = op.group == CommGroup::Shard     ? p.shard_group
                     : op.group == CommGroup::Replica ? p.replicas()
                     : op.group == CommGroup::World   ? p.world
                                                      : 1;
      if (op.group != CommGroup::None && op.group_size != want)
        fail("{} (#{}) has group size {}, but its {} group has {} ranks", op.label(), op.id,
             op.group_size, to_string(op.group), want);
    }
  }

  void hybrid_all_reduce_once() {
    const ParallelSpec& p = s_.units.spec.parallel;
    if (!is_hybrid(p.sharding) || p.replicas() <= 1 || p.shard_group <= 1) return;
    const int64_t last_mb = p.accumulate.micro_batches - 1;
    std::map<int, int> count;
    for (const Op& op : s_.ops) {
      if (op.kind != OpKind::AllReduce || op.unit < 0) continue;
      ++count[op.unit];
      for (const Op& b : s_.ops)
        if (b.kind == OpKind::Backward && b.unit == op.unit && b.micro_batch == last_mb &&
            b.id > op.id)
          fail("{} (#{}) comes before the last micro-batch's backward #{}", op.label(), op.id,
               b.id);
    }
    for (const FlatUnit& u : s_.units.units)
      if (u.padded_elems > 0 && count[u.index] != 1)
        fail("unit {} has {} cross-replica all-reduces per step; hybrid sharding needs exactly one",
             u.index, count[u.index]);
  }

  // offload = cpu: what a GPU program runs on the host (runs_on_host) uses
  // host memory only, and no op on the device waits for it within the step.
  void device_never_waits_for_the_host() {
    for (const Op& op : s_.ops) {
      if (runs_on_host(s_, op)) {
        for (int b : op.uses)
          if (s_.buffers[b].space == MemSpace::Device)
            fail("{} (#{}) runs on the host but uses {}, which is in device memory", op.label(),
                 op.id, s_.buffers[b].name);
        continue;
      }
      for (int d : op.deps)
        if (d >= 0 && d < op.id && runs_on_host(s_, s_.ops[d]))
          fail("{} (#{}) runs on the device but waits for {} (#{}), which runs on the host",
               op.label(), op.id, s_.ops[d].label(), d);
    }
  }

  // optimizer = muon(...): every Muon matrix has one owner in the shard
  // group, its slices cover it once, the owner's momentum and gathered
  // matrices fit their buffers without overlap, and each unit's ops run in
  // order: gather (shard group > 1), Newton-Schulz after the step's gate,
  // scatter, then the unit's optimizer step.
  void muon_is_planned() {
    const MuonPlan& plan = s_.muon;
    if (plan.matrices.empty()) return;
    const int64_t S = s_.units.spec.parallel.shard_group;
    auto bytes_of = [&](BufferKind k, int unit) -> int64_t {
      for (const Buffer& b : s_.buffers)
        if (b.kind == k && b.unit == unit) return b.bytes;
      return 0;
    };
    std::map<int64_t, std::vector<std::pair<int64_t, int64_t>>> momentum;  // per owner
    for (size_t u = 0; u < plan.matrices.size(); ++u) {
      std::map<int64_t, int64_t> gathered;  // per owner: elements
      for (size_t i = 0; i < plan.matrices[u].size(); ++i) {
        const MuonMatrix& m = plan.matrices[u][i];
        const MuonOwner& o = plan.owners[u].matrices[i];
        if (o.owner < 0 || o.owner >= S)
          fail("Muon matrix {} has owner {}, outside its shard group of {}", m.name, o.owner, S);
        int64_t covered = 0;
        for (const MuonSlice& sl : o.slices) {
          if (sl.begin != covered || sl.end <= sl.begin)
            fail("Muon matrix {}: rank {}'s slice [{}, {}) does not continue at {}", m.name,
                 sl.rank, sl.begin, sl.end, covered);
          covered = sl.end;
        }
        if (covered != m.elems())
          fail("Muon matrix {}: its slices cover {} of its {} elements", m.name, covered,
               m.elems());
        momentum[o.owner].push_back({o.momentum_offset, o.momentum_offset + m.elems()});
        gathered[o.owner] = std::max(gathered[o.owner], o.gathered_offset + m.elems());
      }
      const int64_t per_elem = dtype_bytes(grad_shard_dtype(s_.units.spec.parallel)) + 4;
      if (S > 1)
        for (const auto& [owner, elems] : gathered)
          if (elems * per_elem > bytes_of(BufferKind::MuonGathered, static_cast<int>(u)))
            fail("unit {}: rank {} gathers {} B of Muon matrices into a buffer of {} B", u, owner,
                 elems * per_elem, bytes_of(BufferKind::MuonGathered, static_cast<int>(u)));
      if (!plan.matrices[u].empty()) muon_ops_in_order(static_cast<int>(u), S);
    }
    const int64_t momentum_bytes = bytes_of(BufferKind::MuonMomentum, -1);
    for (auto& [owner, ranges] : momentum) {
      std::sort(ranges.begin(), ranges.end());
      for (size_t k = 0; k < ranges.size(); ++k) {
        if (k > 0 && ranges[k].first < ranges[k - 1].second)
          fail("rank {}'s Muon momentum overlaps at element {}", owner, ranges[k].first);
        if (ranges[k].second * 4 > momentum_bytes)
          fail("rank {}'s Muon momentum ends at {} B, past its buffer's {} B", owner,
               ranges[k].second * 4, momentum_bytes);
      }
    }
  }

  void muon_ops_in_order(int unit, int64_t S) {
    int gather = -1, ns = -1, scatter = -1, opt = -1, gate = -1;
    for (const Op& op : s_.ops) {
      if (op.kind == OpKind::GradNorm || (op.kind == OpKind::AllReduce && op.unit < 0))
        gate = op.id;  // the last op of the step's gate
      if (op.unit != unit) continue;
      if (op.kind == OpKind::MuonGather) gather = op.id;
      if (op.kind == OpKind::MuonOrthogonalize) ns = op.id;
      if (op.kind == OpKind::MuonScatter) scatter = op.id;
      if (op.kind == OpKind::OptimizerStep) opt = op.id;
    }
    const bool sharded = S > 1;
    if (ns < 0 || opt < 0 || (sharded && (gather < 0 || scatter < 0))) {
      fail(
          "unit {} has Muon matrices but lacks its Muon ops (gather #{}, Newton-Schulz #{}, "
          "scatter #{}, optimizer #{})",
          unit, gather, ns, scatter, opt);
      return;
    }
    const Op& n = s_.ops[ns];
    if (sharded && !has_dep(n, gather))
      fail("{} (#{}) does not wait for its gather #{}", n.label(), ns, gather);
    if (gate >= 0 && !has_dep(n, gate) && s_.ops[gate].stream != n.stream)
      fail("{} (#{}) does not wait for the step's gate #{}", n.label(), ns, gate);
    if (gate > ns) fail("{} (#{}) is issued before the step's gate #{}", n.label(), ns, gate);
    const int applied = sharded ? scatter : ns;
    if (sharded && !has_dep(s_.ops[scatter], ns))
      fail("{} (#{}) does not wait for {} (#{})", s_.ops[scatter].label(), scatter, n.label(), ns);
    if (!has_dep(s_.ops[opt], applied) && s_.ops[applied].stream != s_.ops[opt].stream)
      fail("{} (#{}) does not wait for #{}, which brings its Muon updates", s_.ops[opt].label(),
           opt, applied);
  }

  const Schedule& s_;
  const MemoryPlan& m_;
  std::vector<int> freed_at_;
  std::vector<std::string> errors_;
};

}  // namespace

std::vector<std::string> verify_plan(const Schedule& s, const MemoryPlan& m) {
  return Verifier(s, m).run();
}

}  // namespace fsdpgen
