// arena: the one allocation per memory space that every buffer of the plan
// lives in, at the offsets the planner chose. Pages are touched once at start
// so that nothing is faulted in during a step; a guard region after each
// arena catches writes past the plan. Lifetimes are tracked as the step runs
// (a buffer is live from the op that starts it to its Free) to measure the
// high-water mark that the plan predicted.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "runtime/program.h"

struct arena {
  std::byte* device = nullptr;  // device_arena_bytes (+ guard)
  std::byte* host = nullptr;    // host_arena_bytes (+ guard)
  int64_t device_bytes = 0, host_bytes = 0;
  std::atomic<int64_t> live_bytes{0};  // device bytes live now
  std::atomic<int64_t> high_water{0};  // max of live_bytes since the last reset
};

void arena_create(arena& a, const program& p);
// Sets the live accounting to the persistent device buffers (done by
// arena_create; backends that allocate their own arena call it).
void arena_reset_accounting(arena& a, const program& p);
void arena_destroy(arena& a);
// Lifetime marks, called by the executor around each op.
void arena_start(arena& a, const program& p, const int* buffers, int count);
void arena_end(arena& a, const program& p, const int* buffers, int count);
// Throws if a guard byte changed (a kernel wrote past its buffer's arena).
void arena_check_guards(const arena& a);
// The guard after each arena: kArenaGuardBytes bytes of kArenaGuardByte.
inline constexpr int64_t kArenaGuardBytes = 4096;
inline constexpr unsigned char kArenaGuardByte = 0xA5;
// Throws if the guard region (bytes of the arena named `what`, seen from
// `guard`: the region itself, or a host copy of a device arena's) changed.
void arena_check_guard(const std::byte* guard, int64_t arena_bytes, const char* what);
inline std::byte* arena_base(const arena& a, memory_space s) {
  return s == memory_space::device ? a.device : a.host;
}
