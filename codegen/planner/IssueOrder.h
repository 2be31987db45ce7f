// IssueOrder: what the schedule builder has issued so far, in issue order:
// the schedule's buffers and ops, each buffer's users, and the compute
// stream's tail. It keeps the rule that makes issue positions safe
// lifetimes (codegen/planner/Schedule.h): a first use of a buffer on another
// stream waits for the last compute op issued, so it comes after every Free
// issued before it; and a Free waits for every use of what it frees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/planner/Schedule.h"

namespace fsdpgen::schedule_builder {

class IssueOrder {
 public:
  // `start`: the schedule's units, options and Muon plan, no buffer or op yet.
  explicit IssueOrder(Schedule start) : s_(std::move(start)) {}

  // A new buffer's index, or -1 when it has no bytes.
  int buffer(BufferKind kind, MemSpace space, std::string name, int64_t bytes, int unit, int mb,
             bool persistent);
  const Buffer& buffer_at(int id) const { return s_.buffers[static_cast<size_t>(id)]; }

  // Appends op (its operands without a buffer dropped, its deps on its own
  // stream or on no op dropped, the rest sorted) and returns its id.
  int emit(Op op);

  // A Free on the compute stream after every use of the buffers (-1s
  // ignored; nothing when none is left).
  void free_now(std::vector<int> bufs);

  // The schedule built; the order is spent.
  Schedule take() { return std::move(s_); }

 private:
  Schedule s_;
  std::vector<std::vector<int>> users_;  // per buffer, the ops that used it
  int last_compute_ = -1;                // the compute stream's tail
};

// An op of `kind` on `stream` for unit, segment and micro-batch (-1: none).
Op make_op(OpKind kind, StreamId stream, int unit, int segment, int mb);
// A collective over `group` of `size` ranks moving `payload` bytes.
Op collective(OpKind kind, StreamId stream, int unit, int mb, CommGroup group, int64_t size,
              int64_t payload);

}  // namespace fsdpgen::schedule_builder
