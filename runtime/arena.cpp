// arena: the CPU's mappings and the guards.
#include "runtime/arena.h"

#include <fmt/format.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "runtime/check.h"
#include "runtime/machine_memory.h"

namespace {

std::byte* allocate(int64_t bytes, const char* what) {
  void* p = ::mmap(nullptr, static_cast<size_t>(arena_mapped_bytes(bytes)), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw runtime_error(
        fmt::format("cannot allocate the {} arena of {} bytes planned for this rank: {}", what,
                    bytes, std::strerror(errno)));
  // Fresh pages read as zero; writing them makes them resident now.
  std::memset(p, 0, static_cast<size_t>(bytes));
  std::memset(static_cast<std::byte*>(p) + bytes, kArenaGuardByte, kArenaGuardBytes);
  return static_cast<std::byte*>(p);
}

void release(std::byte* p, int64_t bytes) {
  if (p) ::munmap(p, static_cast<size_t>(arena_mapped_bytes(bytes)));
}

}  // namespace

int64_t arena_mapped_bytes(int64_t bytes) {
  const int64_t page = host_page_bytes();
  return (bytes + kArenaGuardBytes + page - 1) / page * page;
}

void arena_create(arena& a, const program& p, int64_t extra_bytes) {
  a.device_bytes = p.plan.device_arena_bytes + extra_bytes;
  a.host_bytes = p.plan.host_arena_bytes;
  a.device = allocate(a.device_bytes, "device");
  if (a.host_bytes > 0) a.host = allocate(a.host_bytes, "host");
}

void arena_destroy(arena& a) {
  release(a.device, a.device_bytes);
  release(a.host, a.host_bytes);
  a.device = a.host = nullptr;
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
