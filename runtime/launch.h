// launch: process start-up. Finds how the binary was started (alone, under
// mpirun, under srun with PMIx), re-launches itself under mpirun when started
// alone for a world larger than one (staying as mpirun's parent, so that a
// SIGTERM to it reaches the ranks as a SIGUSR1: stop with a checkpoint, exit
// 0), initializes MPI with thread support,
// agrees on the program hash with every rank (a mismatch stops every rank,
// said once by rank 0, never a hang), checks the world size, and sizes the thread pools.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/placement.h"
#include "runtime/program.h"

struct launch_info {
  int64_t rank = 0, world = 1;
  int64_t local_rank = 0, local_size = 1;
  int threads = 1;          // OpenMP and OpenBLAS threads of this rank
  std::string launcher;     // "single process", "mpirun", "srun"
  bool relaunched = false;  // started alone, this binary re-launched itself under mpirun
  rank_placement where;     // each rank's host (runtime/placement.h)
};

// OpenMP threads spinning beside OpenBLAS's slow GEMMs down several times;
// libgomp reads its wait policy when it loads, so this sets
// OMP_WAIT_POLICY=passive and starts the process again (from argv), unless
// the variable is set. Call it first thing in main.
void launch_prefer_passive_openmp(char** argv);

// Whether a launcher that starts MPI ranks (mpirun, srun --mpi=pmix, another
// PMI launcher) started this process.
bool launch_under_mpi_launcher();

// Returns only when this process should train; exits (after printing why) when
// it re-launched itself or the launch is wrong. argv[0] is used to re-launch.
launch_info launch_init(const program& p, int argc, char** argv);
void launch_finalize();
// The plan's placement of `p`: its world, shard group and ranks per node.
placement_plan launch_plan(const program& p);
// This rank's position among the ranks on its node, and their number
// (MPI_COMM_TYPE_SHARED; collective over MPI_COMM_WORLD).
void launch_local_rank(int& local_rank, int& local_size);
