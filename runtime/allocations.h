// allocations: counts the heap allocations this process makes while a step
// runs, on any thread and through any door (malloc, calloc, realloc,
// aligned_alloc, posix_memalign, memalign, valloc, pvalloc and every
// operator new), by standing in front of glibc's allocator. Each is charged
// to fsdpgen's own code (this executable: the runtime and the generated
// step) or to the shared library that asked (OpenBLAS, libgomp, MPI, CUDA
// libraries). The step is planned so that fsdpgen allocates nothing; this
// is how a run proves it.
#pragma once

#include <cstdint>
#include <string>

// Counting is on between allocations_count(true) and allocations_count(false).
void allocations_count(bool on);

struct allocations_counted {
  int64_t own = 0;        // asked for by code in this executable
  int64_t libraries = 0;  // asked for by code in a shared library
};
allocations_counted allocations_so_far();
// The shared libraries that allocated while counting was on ("libgomp.so.1,
// libopenblas.so.0"; the first few seen), for the report; allocates.
std::string allocations_library_names();
