// arena: allocation, guards and live-byte accounting.
#include "runtime/arena.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/check.h"

namespace {

constexpr size_t kAlignment = 4096;

std::byte* allocate(int64_t bytes, const char* what) {
  size_t total =
      static_cast<size_t>((bytes + kArenaGuardBytes + kAlignment - 1) / kAlignment * kAlignment);
  void* p = std::aligned_alloc(kAlignment, total);
  if (!p)
    throw runtime_error(
        fmt::format("cannot allocate the {} arena of {} bytes planned for this rank", what, bytes));
  std::memset(p, 0, static_cast<size_t>(bytes));
  std::memset(static_cast<std::byte*>(p) + bytes, kArenaGuardByte, kArenaGuardBytes);
  return static_cast<std::byte*>(p);
}

}  // namespace

void arena_create(arena& a, const program& p) {
  a.device_bytes = p.device_arena_bytes;
  a.host_bytes = p.host_arena_bytes;
  a.device = allocate(a.device_bytes, "device");
  if (a.host_bytes > 0) a.host = allocate(a.host_bytes, "host");
  arena_reset_accounting(a, p);
}

void arena_reset_accounting(arena& a, const program& p) {
  int64_t persistent = 0;
  for (int b = 0; b < p.buffer_count; ++b)
    if (p.buffers[b].persistent && p.buffers[b].space == memory_space::device)
      persistent += p.buffers[b].bytes;
  a.live_bytes = persistent;
  a.high_water = persistent;
}

void arena_destroy(arena& a) {
  std::free(a.device);
  std::free(a.host);
  a.device = a.host = nullptr;
}

void arena_start(arena& a, const program& p, const int* buffers, int count) {
  int64_t add = 0;
  for (int i = 0; i < count; ++i)
    if (p.buffers[buffers[i]].space == memory_space::device) add += p.buffers[buffers[i]].bytes;
  if (add == 0) return;
  int64_t now = a.live_bytes.fetch_add(add) + add;
  int64_t hw = a.high_water.load();
  while (now > hw && !a.high_water.compare_exchange_weak(hw, now)) {
  }
}

void arena_end(arena& a, const program& p, const int* buffers, int count) {
  int64_t sub = 0;
  for (int i = 0; i < count; ++i)
    if (p.buffers[buffers[i]].space == memory_space::device) sub += p.buffers[buffers[i]].bytes;
  a.live_bytes.fetch_sub(sub);
}

void arena_check_guard(const std::byte* guard, int64_t arena_bytes, const char* what) {
  for (int64_t i = 0; i < kArenaGuardBytes; ++i)
    if (static_cast<unsigned char>(guard[i]) != kArenaGuardByte)
      throw std::runtime_error(fmt::format(
          "internal error: a kernel wrote past the end of the {} arena ({} bytes, byte +{} "
          "changed)",
          what, arena_bytes, i));
}

void arena_check_guards(const arena& a) {
  if (a.device) arena_check_guard(a.device + a.device_bytes, a.device_bytes, "device");
  if (a.host) arena_check_guard(a.host + a.host_bytes, a.host_bytes, "host");
}
