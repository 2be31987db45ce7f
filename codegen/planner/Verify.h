// Verify: checks the invariants a schedule and its memory plan must hold
// (DESIGN §8): every compute on a gathered unit is preceded by the
// all-gather it depends on and its buffer is freed after; a reduce-scatter
// comes after the last backward that writes its gradients and depends on it;
// max_inflight holds; live buffers never share bytes, and a buffer that
// reuses another's bytes is ordered after its Free; the peak breakdown sums
// to the peak; each collective's group size is its group's (every rank runs
// the one op list, so the collective sequences agree by construction);
// hybrid all-reduces come once per step, after the last
// micro-batch; with offload, the ops a GPU program runs on the host use host
// memory only and no op on the device waits for one. Returns one message per
// violation (empty: all hold).
#pragma once

#include <string>
#include <vector>

#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"

namespace fsdpgen {

std::vector<std::string> verify_plan(const Schedule& s, const MemoryPlan& m);

}  // namespace fsdpgen
