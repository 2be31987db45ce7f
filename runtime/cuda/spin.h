// spin (CUDA): a kernel that keeps a stream busy for a given time, the GPU's
// --inject-stall (runtime/train/watchdog.h): a rank's GPU really stalls in an op,
// as a hung kernel or a collective a peer never joins would leave it.
#pragma once

#include <cuda_runtime.h>

// Enqueues on `stream` one thread that spins until `seconds` have passed on
// the GPU's global timer (ns) since it started.
void cuda_spin(cudaStream_t stream, double seconds);
