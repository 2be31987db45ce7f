// muon_checkpoint: optimizer = muon(...)'s state in a checkpoint. A
// checkpoint keeps optimizer state in the shard layout of the weights (two
// planes over each shard: runtime/train/checkpoint.h), so that it reshards by
// tensor position to any world size. Under Muon a shard's AdamW elements
// keep their m and v in the compacted state, and a matrix's momentum lives
// with its owner: saving brings each shard the momentum of the slices it
// holds (plane 0; plane 1 is 0 there), resuming sends each owner the
// momentum of its matrices from the shards that hold them. Collective over
// the shard group (comm); no step may run meanwhile.
#pragma once

#include <mpi.h>

#include "runtime/step_context.h"

// Unit `unit`'s state as the checkpoint keeps it: planes (2 x shard_elems
// floats, host memory).
void muon_state_to_planes(step_context& c, int unit, float* planes, MPI_Comm comm);
// The inverse, from planes read from a checkpoint.
void muon_state_from_planes(step_context& c, int unit, const float* planes, MPI_Comm comm);
