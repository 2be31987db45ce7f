// IssueOrder: buffers and ops appended in issue order, with the waits that
// make issue positions lifetimes.
#include "codegen/planner/IssueOrder.h"

#include <algorithm>

namespace fsdpgen::schedule_builder {

int IssueOrder::buffer(BufferKind kind, MemSpace space, std::string name, int64_t bytes, int unit,
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

int IssueOrder::emit(Op op) {
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

void IssueOrder::free_now(std::vector<int> bufs) {
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

Op make_op(OpKind kind, StreamId stream, int unit, int segment, int mb) {
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

}  // namespace fsdpgen::schedule_builder
