// contention: a collective and a layer pass at once on each rank of the
// collective's group, as a training step runs them on a CPU: the collective
// called back to back on a worker thread through the comm layer (which
// progresses only when that thread polls), the layer pass back to back on
// this thread, both on the rank's cores. The CPU runtime only: a GPU's
// collectives run in NCCL's kernels (sweep_check refuses the entries there).
#pragma once

#include <mpi.h>

#include "runtime/calibrate/measure.h"
#include "runtime/calibrate/target.h"
#include "runtime/profile/profile.h"

struct contention_measurement {
  measurement collective;  // one call's mean time while the layer passes ran
  measurement layer;       // one pass's mean time while the calls ran
};

// Called on every rank of `group` (ranks_group of e.collective's ranks, in
// the compute section of as many ranks per node). The calls are enough for
// the layer pass to end several times beside them; each time is the slowest
// rank's, the same on all of them.
contention_measurement measure_contention(const fsdpgen::profile::ContentionTime& e, MPI_Comm group,
                                          calibrate_target& t, const measure_options& o);
