// machine_memory: readings from /proc/self and mincore, into stack buffers.
#include "runtime/machine_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
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

namespace {

// One entry of getdents64 (the raw call: opendir would allocate).
struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

// Whether a thread of this process other than `self` is running now.
bool other_thread_running(long self) {
  const int dir = ::open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char entries[4096];
  bool running = false;
  for (long n; !running && (n = ::syscall(SYS_getdents64, dir, entries, sizeof entries)) > 0;) {
    for (long at = 0; at < n && !running;) {
      const auto* d = reinterpret_cast<const linux_dirent64*>(entries + at);
      at += d->d_reclen;
      if (d->d_name[0] < '0' || d->d_name[0] > '9' || std::atol(d->d_name) == self) continue;
      char name[64] = "task/";
      std::strncat(name, d->d_name, 40);
      std::strncat(name, "/stat", 6);
      char stat[512];
      read_proc_self(name, stat, sizeof stat);
      // "tid (comm) S ...": the state follows the last ')'.
      const char* close = std::strrchr(stat, ')');
      running = close && close[1] == ' ' && close[2] == 'R';
    }
  }
  ::close(dir);
  return running;
}

}  // namespace

bool host_wait_other_threads_idle(int limit_ms) {
  const long self = ::syscall(SYS_gettid);
  for (int waited_ms = 0;; waited_ms += 2) {
    if (!other_thread_running(self)) return true;
    if (waited_ms >= limit_ms) return false;
    ::usleep(2000);
  }
}
