// machine_memory: readings from /proc/self and mincore, into stack buffers.
#include "runtime/machine_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

// The start of /proc/self/<name> into buf (NUL-terminated); empty on failure.
void read_proc_self(const char* name, char* buf, size_t size) {
  buf[0] = '\0';
  char path[64] = "/proc/self/";
  std::strncat(path, name, sizeof path - std::strlen(path) - 1);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  size_t got = 0;
  while (got + 1 < size) {
    const ssize_t n = ::read(fd, buf + got, size - 1 - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  buf[got] = '\0';
  ::close(fd);
}

}  // namespace

int64_t host_page_bytes() {
  return static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

namespace {

// /proc/self/statm's resident and shared (file-backed and shared memory) pages.
void statm_resident_and_shared(int64_t& resident, int64_t& shared) {
  char buf[256];
  read_proc_self("statm", buf, sizeof buf);
  // size resident shared text lib data dt, in pages
  char* rest = nullptr;
  std::strtoll(buf, &rest, 10);
  resident = std::strtoll(rest, &rest, 10);
  shared = std::strtoll(rest, nullptr, 10);
}

}  // namespace

int64_t host_resident_bytes() {
  int64_t resident = 0, shared = 0;
  statm_resident_and_shared(resident, shared);
  return resident * host_page_bytes();
}

int64_t host_anonymous_resident_bytes() {
  int64_t resident = 0, shared = 0;
  statm_resident_and_shared(resident, shared);
  return (resident - shared) * host_page_bytes();
}

namespace {

// The field `key` ("\nRss:") of /proc/self/smaps_rollup in bytes: -1 if absent.
int64_t smaps_rollup_bytes(const char* key) {
  char buf[2048];
  read_proc_self("smaps_rollup", buf, sizeof buf);
  const char* line = std::strstr(buf, key);
  return line ? std::strtoll(line + std::strlen(key), nullptr, 10) * 1024 : -1;  // "Rss:  1234 kB"
}

}  // namespace

int64_t host_resident_bytes_exact() {
  return smaps_rollup_bytes("\nRss:");
}

int64_t host_anonymous_bytes_exact() {
  return smaps_rollup_bytes("\nAnonymous:");
}

int64_t host_peak_resident_bytes() {
  char buf[4096];
  read_proc_self("status", buf, sizeof buf);
  const char* line = std::strstr(buf, "VmHWM:");
  return line ? std::strtoll(line + 6, nullptr, 10) * 1024 : 0;  // "VmHWM:  1234 kB"
}

int64_t host_resident_bytes_in(const void* p, int64_t bytes) {
  const int64_t page = host_page_bytes();
  const uintptr_t begin =
      reinterpret_cast<uintptr_t>(p) / static_cast<uintptr_t>(page) * static_cast<uintptr_t>(page);
  const int64_t pages =
      (static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) - begin) + bytes + page - 1) / page;
  unsigned char vec[4096];
  const int64_t batch = static_cast<int64_t>(sizeof vec);
  int64_t resident = 0;
  for (int64_t first = 0; first < pages; first += batch) {
    const int64_t n = pages - first < batch ? pages - first : batch;
    void* at = reinterpret_cast<void*>(begin + static_cast<uintptr_t>(first * page));
    if (::mincore(at, static_cast<size_t>(n * page), vec) != 0) return -1;
    for (int64_t i = 0; i < n; ++i)
      resident += vec[i] & 1;
  }
  return resident * page;
}
