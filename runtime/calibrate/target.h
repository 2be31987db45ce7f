// target: the runtime a calibration measures, asked by the sweep for each
// entry: the CPU runtime (cpu_target.cpp) or, where it was built, the CUDA
// runtime (cuda/cuda_target.cu). The request's device.kind chooses.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "runtime/calibrate/measure.h"
#include "runtime/calibrate/ranks.h"
#include "runtime/profile/profile.h"

class calibrate_target {
 public:
  virtual ~calibrate_target() = default;
  // The device measured; `base` is the request's.
  virtual fsdpgen::profile::Device describe(const std::string& base) const = 0;
  // Why this target cannot run entry `l`, or "" when it can.
  virtual std::string layer_problem(const fsdpgen::profile::LayerTime& l) const = 0;
  // Before a compute section: returns the threads each of its ranks computes
  // with (the runtime's launch gives a rank cores / ranks per node) and sets
  // them on this rank when it is `measuring`.
  virtual int64_t enter_compute(int64_t ranks_per_node, bool measuring) = 0;
  // What handing one op of the schedule to its stream costs.
  virtual measurement op_overhead(const measure_options& o) = 0;
  virtual measurement layer(const fsdpgen::profile::LayerTime& l, const measure_options& o) = 0;
  virtual measurement elementwise(const fsdpgen::profile::ElementwiseTime& e,
                                  const measure_options& o) = 0;
  // Muon's owner step on one matrix (runtime/cpu/muon.h's muon_orthogonalize or
  // its device twin).
  virtual measurement muon_ns(const fsdpgen::profile::MuonNsTime& m, const measure_options& o) = 0;
  // On every rank of `group` (the first c.ranks ranks of the world); the
  // slowest rank's time of each run, the same on all of them.
  virtual measurement collective(const fsdpgen::profile::CollectiveTime& c, MPI_Comm group,
                                 const measure_options& o) = 0;
  virtual measurement copy(const fsdpgen::profile::CopyTime& c, const measure_options& o) = 0;
};

std::unique_ptr<calibrate_target> cpu_target();

// The CUDA runtime on this rank's GPU (local rank i takes device i, as the
// runtime's nccl mode); collective over the world. Defined only where
// FSDPGEN_CALIBRATE_CUDA is.
std::unique_ptr<calibrate_target> cuda_target();

// Threads per rank when `ranks_per_node` ranks share this node's cores.
int64_t threads_per_rank(int64_t ranks_per_node);
