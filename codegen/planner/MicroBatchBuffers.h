// MicroBatchBuffers: the buffers of the micro-batch the schedule builder is
// issuing: its inputs and logits, each segment group's saved activations,
// and, when activations are offloaded, their host copies and the copies
// bringing them back for backward.
#pragma once

#include <vector>

#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

class MicroBatchBuffers {
 public:
  MicroBatchBuffers(const StepShape& shape, IssueOrder& issue) : shape_(shape), issue_(issue) {}

  // A new micro-batch: no activations yet, its inputs issued.
  void start(int mb);

  // offload activations: group g's saved input (a block's, kept for
  // recompute) goes to host memory once the group's forward is done with it;
  // the device copy is freed when the copy is done.
  void offload_saved(int g, int mb, int forward_op);
  // ...and comes back into a device buffer of its own before its backward
  // (issued one group ahead, as backward prefetch issues the gathers).
  void fetch_saved(int g, int mb);

  int inputs = -1, logits = -1;
  std::vector<int> acts;       // per segment group, its saved activations
  std::vector<int> host_acts;  // offloaded: per segment group, the saved input on the host
  std::vector<int> fetch_op;   // offloaded: per segment group, the copy bringing it back

 private:
  const StepShape& shape_;
  IssueOrder& issue_;
};

}  // namespace fsdpgen::schedule_builder
