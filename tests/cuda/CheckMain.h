// CheckMain: the main() of the cuda tests' MPI check programs (CommCheck,
// CudaMuonCheck), which a test runs under mpirun: run() on every rank, an
// exception an error naming the rank that aborts the job (another rank may be
// waiting in a collective), run()'s status the exit status.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>

inline int mpi_check_main(int argc, char** argv, int (*run)()) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = 1;
  try {
    status = run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);  // another rank may be waiting in a collective
  }
  MPI_Finalize();
  return status;
}
