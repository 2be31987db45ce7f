// machine_memory: this process's memory as the machine counts it (the
// kernel for host memory; runtime/cuda asks the GPU driver for device
// memory), not as the plan adds it up. A run reports these beside the plan.
// None of these allocate.
#pragma once

#include <cstdint>

// This process's resident set now (/proc/self/statm). The kernel sums its
// per-CPU counters lazily, so a reading may lag by a few pages per CPU.
int64_t host_resident_bytes();
// The part of it that is anonymous memory (heap, stacks, the arenas): not
// the page cache of files mapped (token data) or shared memory (MPI's
// transport); /proc/self/statm's resident less its shared, so RssAnon.
int64_t host_anonymous_resident_bytes();
// The resident set, exact: the kernel walks every mapping's pages
// (/proc/self/smaps_rollup), which takes time in proportion to the memory
// mapped; for readings around an allocation.
int64_t host_resident_bytes_exact();
// The part of it that is anonymous memory, exact (smaps_rollup's Anonymous,
// the same walk): for readings around set-up, where statm may lag.
int64_t host_anonymous_bytes_exact();
// The kernel's high-water mark of the resident set (VmHWM, /proc/self/status).
int64_t host_peak_resident_bytes();
// Bytes of the pages that [p, p + bytes) touches that are resident now,
// page by page (mincore): exact; -1 if the range is not mapped.
int64_t host_resident_bytes_in(const void* p, int64_t bytes);
int64_t host_page_bytes();
// Waits, at most limit_ms, until no other thread of this process is running
// (state R in /proc/self/task/*/stat); true if none is. Libraries' worker
// threads (OpenBLAS's) spin for a while after they start, then sleep,
// touching a new stack page as they do: a reading of the resident set
// around an allocation waits for them first, so that it sees the
// allocation alone.
bool host_wait_other_threads_idle(int limit_ms);
