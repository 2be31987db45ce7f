// MicroBatchBuffers: a micro-batch's inputs and saved activations, and their
// trips to the host and back.
#include "codegen/planner/MicroBatchBuffers.h"

#include <fmt/format.h>

namespace fsdpgen::schedule_builder {

void MicroBatchBuffers::start(int mb) {
  const size_t n = shape_.segments().size();
  acts.assign(n, -1);
  host_acts.assign(n, -1);
  fetch_op.assign(n, -1);
  inputs = issue_.buffer(BufferKind::Inputs, MemSpace::Device, fmt::format("inputs.mb{}", mb),
                         inputs_bytes(shape_.act), -1, mb, false);
}

void MicroBatchBuffers::offload_saved(int g, int mb, int forward_op) {
  const int u = shape_.segments()[g].unit;
  const int64_t bytes = shape_.saved_bytes(g);
  host_acts[g] = issue_.buffer(BufferKind::Activations, MemSpace::Host,
                               fmt::format("acts_host.s{}.mb{}", g, mb), bytes, u, mb, false);
  Op d2h = make_op(OpKind::CopyD2H, StreamId::Copy, u, g, mb);
  d2h.payload_bytes = bytes;
  d2h.operands = {{Role::Src, acts[g]}, {Role::Dst, host_acts[g]}};
  d2h.deps = {forward_op};
  issue_.emit(d2h);
  issue_.free_now({acts[g]});
  acts[g] = -1;
}

void MicroBatchBuffers::fetch_saved(int g, int mb) {
  if (host_acts[g] < 0 || fetch_op[g] >= 0) return;
  const int u = shape_.segments()[g].unit;
  const int64_t bytes = shape_.saved_bytes(g);
  acts[g] = issue_.buffer(BufferKind::Activations, MemSpace::Device,
                          fmt::format("acts.s{}.mb{}.back", g, mb), bytes, u, mb, false);
  Op h2d = make_op(OpKind::CopyH2D, StreamId::Copy, u, g, mb);
  h2d.payload_bytes = bytes;
  h2d.operands = {{Role::Src, host_acts[g]}, {Role::Dst, acts[g]}};
  fetch_op[g] = issue_.emit(h2d);
  issue_.free_now({host_acts[g]});
  host_acts[g] = -1;
}

}  // namespace fsdpgen::schedule_builder
