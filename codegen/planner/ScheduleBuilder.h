// ScheduleBuilder: the step builder behind build_schedule
// (codegen/planner/Schedule.h), private to the planner. It walks
// micro-batches, forward segments, backward segments and the optimizer,
// issuing ops in order. What it holds is a value per responsibility, each in
// the file named after it:
//   StepShape          the step's fixed facts (groups, switches, bytes)
//   IssueOrder         what has been issued: buffers, ops, the compute tail
//   PersistentBuffers  what lives across steps (shards, master, state, ...)
//   Gathers            which units' parameters are in, and prefetch
//   Gradients          unsharded gradients, their shards and reductions
//   MicroBatchBuffers  the current micro-batch's inputs and activations
//   MuonExchange       Muon's gathers, orthogonalization and scatters
// The phases are functions of a Builder, one file each: ScheduleForward.cpp,
// ScheduleBackward.cpp and ScheduleOptimizer.cpp.
#pragma once

#include "codegen/planner/Gathers.h"
#include "codegen/planner/Gradients.h"
#include "codegen/planner/IssueOrder.h"
#include "codegen/planner/MicroBatchBuffers.h"
#include "codegen/planner/MuonExchange.h"
#include "codegen/planner/PersistentBuffers.h"
#include "codegen/planner/Schedule.h"
#include "codegen/planner/StepShape.h"

namespace fsdpgen::schedule_builder {

struct Builder {
  // Precondition: `units` outlives the builder.
  Builder(const Units& units, const ScheduleOptions& options);
  Builder(const Builder&) = delete;  // its values refer to each other
  Builder& operator=(const Builder&) = delete;

  // The whole step: persistent buffers, each micro-batch's forward and
  // backward, the optimizer.
  Schedule run();

  StepShape shape;
  IssueOrder issue;
  Gradients gradients;
  PersistentBuffers persistent;
  Gathers gathers;
  MicroBatchBuffers micro;
  MuonExchange muon;
  int loss_forward = -1;  // the last forward op that computes losses
};

// Micro-batch mb's forward segments, with their gathers and prefetches, and
// (offload activations) the saved inputs' copies to the host.
void issue_forward(Builder& b, int mb);
// Its backward: segments in reverse with their recomputes, and each unit's
// gradient reduction after its last backward.
void issue_backward(Builder& b, int mb);
// The optimizer step: the gradient norm, the guard's loss, Muon's
// exchange, each unit's update.
void issue_optimizer(Builder& b);

}  // namespace fsdpgen::schedule_builder
