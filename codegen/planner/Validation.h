// Validation: the forward-only pass that measures the loss on held-out data.
// It is not a schedule of its own: a training step's ops, in issue order, up
// to and including the forward of micro-batch 0's last segment (the loss),
// gather the parameters and run one micro-batch's forward and nothing else.
// Run alone, that prefix is a forward pass on the step's own buffers at the
// step's own times, so the memory plan already holds it (its peak is at most
// the step's) and no rank makes a decision the others do not. Deps point
// backwards (Verify), so the prefix waits only on ops inside it.
#pragma once

#include <string>

#include "codegen/planner/Schedule.h"

namespace fsdpgen {

struct ValidationPass {
  int op_count = 0;  // ops 0 .. op_count-1 of the step
  int all_gathers = 0, forwards = 0, copies = 0, frees = 0;
  int other = 0;  // ops of any other kind in the prefix: none in a valid schedule (Verify)
};

ValidationPass validation_pass(const Schedule& s);

// Why the prefix is not a forward-only pass over every segment, or "".
std::string validation_pass_problem(const Schedule& s);

// One line for the printed schedule, e.g. "validation pass: ops #0-#14 (7
// all-gathers, 6 forwards, 2 frees): micro-batch 0's forward alone, no gradients".
std::string describe_validation_pass(const Schedule& s);

}  // namespace fsdpgen
