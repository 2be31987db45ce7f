// Gathers: all-gathers and host copies of parameters, their frees and prefetch.
#include "codegen/planner/Gathers.h"

#include <algorithm>

#include <fmt/format.h>

namespace fsdpgen::schedule_builder {

Gathers::Gathers(const StepShape& shape, IssueOrder& issue, const PersistentBuffers& persistent)
    : shape_(shape), issue_(issue), persistent_(persistent) {
  gathered_.assign(shape.units().size(), -1);
  op_.assign(shape.units().size(), -1);
}

int Gathers::params_of(int u) const {
  return shape_.needs_gather(u) ? gathered_[u] : persistent_.shard[u];
}

std::vector<int> Gathers::take_staging() {
  std::vector<int> out;
  out.swap(staging_);
  return out;
}

int Gathers::alive_blocks() const {
  int n = 0;
  for (size_t u = 1; u < gathered_.size(); ++u)
    n += gathered_[u] >= 0;
  return n;
}

void Gathers::gather(int u, const char* phase, int mb) {
  const StepShape& s = shape_;
  if (!s.needs_gather(u) || gathered_[u] >= 0) return;
  // The host-copy staging of the previous gather is done once its all-gather is.
  issue_.free_now(take_staging());
  int src = persistent_.shard[u];
  int dst = issue_.buffer(BufferKind::UnshardedParams, MemSpace::Device,
                          fmt::format("params.u{}.{}.mb{}", u, phase, mb),
                          s.unit_bytes(u, s.pbytes), u, mb, false);
  int h2d = -1, staging = -1;
  if (s.offload) {
    Op copy = make_op(OpKind::CopyH2D, StreamId::Copy, u, -1, mb);
    copy.payload_bytes = s.shard_bytes(u, s.pbytes);
    if (s.sharded) {
      staging = issue_.buffer(BufferKind::CommStaging, MemSpace::Device,
                              fmt::format("h2d.u{}.{}.mb{}", u, phase, mb),
                              s.shard_bytes(u, s.pbytes), u, mb, false);
      copy.operands = {{Role::Src, src}, {Role::Dst, staging}};
    } else {
      copy.operands = {{Role::Src, src}, {Role::Dst, dst}};
    }
    h2d = issue_.emit(copy);
    src = staging;
  }
  int producer = h2d;
  if (s.sharded) {
    Op ag = collective(OpKind::AllGather, StreamId::AllGather, u, mb, CommGroup::Shard, s.S,
                       s.unit_bytes(u, s.pbytes));
    ag.operands = {{Role::Src, src}, {Role::Dst, dst}};
    ag.deps = {h2d};
    producer = issue_.emit(ag);
    staging_.push_back(staging);
  }
  gathered_[u] = dst;
  op_[u] = producer;
}

void Gathers::release(int u) {
  if (!shape_.needs_gather(u) || gathered_[u] < 0) return;
  issue_.free_now({gathered_[u]});
  gathered_[u] = -1;
}

void Gathers::prefetch(const std::vector<int>& order, size_t pos, const char* phase, int mb) {
  const StepShape& s = shape_;
  int window = static_cast<int>(s.p.prefetch.max_inflight) - 1;
  int current = s.segments()[order[pos]].unit;
  std::vector<int> ahead;
  for (size_t k = pos + 1; k < order.size() && static_cast<int>(ahead.size()) < window; ++k) {
    int v = s.segments()[order[k]].unit;
    if (v == current || v == 0 || std::find(ahead.begin(), ahead.end(), v) != ahead.end()) continue;
    ahead.push_back(v);
  }
  for (int v : ahead) {
    if (gathered_[v] >= 0 || !s.needs_gather(v)) continue;
    if (s.free_after_forward && alive_blocks() >= s.p.prefetch.max_inflight) break;
    gather(v, phase, mb);
  }
}

}  // namespace fsdpgen::schedule_builder
