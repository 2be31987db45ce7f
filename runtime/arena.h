// arena: the one allocation per memory space that every buffer of the plan
// lives in, at the offsets the planner chose. On a CPU each arena is its own
// anonymous mapping, touched once at start so that nothing is faulted in
// during a step and so that the kernel's count of its resident pages
// (runtime/machine_memory.h) is the arena itself; a guard region after each
// arena catches writes past the plan.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/program.h"

struct arena {
  std::byte* device = nullptr;  // device_arena_bytes (+ guard)
  std::byte* host = nullptr;    // host_arena_bytes (+ guard)
  int64_t device_bytes = 0, host_bytes = 0;
};

// The CPU's arenas (the CUDA backend allocates its own); the device arena
// extra_bytes larger than planned (--inject-arena-bytes, a testing aid).
void arena_create(arena& a, const program& p, int64_t extra_bytes);
void arena_destroy(arena& a);
// Bytes an arena of `bytes` occupies with its guard, in whole pages.
int64_t arena_mapped_bytes(int64_t bytes);
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
