// machine_memory: the kernel's counts against pages this test touches
// itself: mincore and smaps_rollup's anonymous pages see exactly the touched
// pages of a fresh mapping, and the resident set and its high-water mark grow
// by them; pages of a file mapped
// read-only grow the resident set but not its anonymous part.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/machine_memory.h"

namespace {

// The kernel sums resident-set counters per CPU lazily: a reading may lag by
// up to 64 pages per CPU (2 x percpu batch on this kernel's machines); 4 MiB
// covers 16 CPUs of 4 KiB pages.
constexpr int64_t kLagBytes = 4 << 20;

struct mapping {
  explicit mapping(int64_t bytes) : bytes(bytes) {
    p = static_cast<char*>(::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~mapping() { ::munmap(p, static_cast<size_t>(bytes)); }
  char* p;
  int64_t bytes;
};

TEST(MachineMemory, MincoreCountsExactlyTheTouchedPages) {
  const int64_t page = host_page_bytes();
  mapping m(64 * page);
  ASSERT_NE(m.p, MAP_FAILED);
  EXPECT_EQ(host_resident_bytes_in(m.p, m.bytes), 0) << "a fresh mapping has no pages yet";
  for (int i = 0; i < 64; i += 2)
    m.p[i * page] = 1;  // every other page
  EXPECT_EQ(host_resident_bytes_in(m.p, m.bytes), 32 * page);
  // A range that starts and ends inside pages counts the pages it touches.
  EXPECT_EQ(host_resident_bytes_in(m.p + page / 2, page), page) << "pages 0 (touched) and 1";
  EXPECT_EQ(host_resident_bytes_in(m.p + page + 1, 10), 0) << "page 1 is not touched";
}

// smaps_rollup's walk is exact: no lag, just the pages touched.
TEST(MachineMemory, TheExactAnonymousCountIsThePagesTouched) {
  const int64_t page = host_page_bytes();
  mapping m(256 * page);
  ASSERT_NE(m.p, MAP_FAILED);
  // As the runtime's reading around the arena: OpenBLAS's workers, started
  // with this process, touch a stack page when they first sleep.
  host_wait_other_threads_idle(1000);
  const int64_t before = host_anonymous_bytes_exact();
  ASSERT_GT(before, 0);
  for (int i = 0; i < 256; i += 2)
    m.p[i * page] = 1;  // every other page
  EXPECT_EQ(host_anonymous_bytes_exact() - before, 128 * page);
}

TEST(MachineMemory, AnUnmappedRangeIsMinusOne) {
  const int64_t page = host_page_bytes();
  char* p;
  {
    mapping m(4 * page);
    p = m.p;
  }
  EXPECT_EQ(host_resident_bytes_in(p, 4 * page), -1);
}

TEST(MachineMemory, TheResidentSetGrowsByTheTouchedBytes) {
  const int64_t bytes = 64 << 20;
  const int64_t before = host_resident_bytes();
  mapping m(bytes);
  ASSERT_NE(m.p, MAP_FAILED);
  std::memset(m.p, 1, static_cast<size_t>(bytes));
  const int64_t after = host_resident_bytes();
  EXPECT_NEAR(static_cast<double>(after - before), static_cast<double>(bytes),
              static_cast<double>(kLagBytes));
  EXPECT_GE(host_peak_resident_bytes(), after - kLagBytes);
  EXPECT_GT(before, 0);
}

// Token files are read through a read-only mapping: their pages are the page
// cache's, which the resident set counts but its anonymous part does not,
// while anonymous pages touched count in both.
// A worker that spins, then sleeps (as OpenBLAS's do after they start) is
// waited for; one that never stops spinning ends the wait at its limit.
TEST(MachineMemory, WaitingForOtherThreadsToGoIdle) {
  using clock = std::chrono::steady_clock;
  std::atomic<bool> spinning{true}, stop{false};
  std::thread worker([&] {
    const auto until = clock::now() + std::chrono::milliseconds(200);
    while (clock::now() < until) {
    }
    spinning = false;
    while (!stop)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  EXPECT_TRUE(host_wait_other_threads_idle(5000));
  EXPECT_FALSE(spinning) << "returned while the worker still spun";
  stop = true;
  worker.join();

  std::atomic<bool> forever{true};
  std::thread spinner([&] {
    while (forever) {
    }
  });
  const auto start = clock::now();
  EXPECT_FALSE(host_wait_other_threads_idle(300));
  const double waited_s = std::chrono::duration<double>(clock::now() - start).count();
  EXPECT_GE(waited_s, 0.25);
  EXPECT_LT(waited_s, 5.0);
  forever = false;
  spinner.join();
}

TEST(MachineMemory, MappedFilePagesAreNotAnonymous) {
  const int64_t bytes = 64 << 20;
  char path[] = "/tmp/machine_memory_XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::unlink(path);
  ASSERT_EQ(::ftruncate(fd, bytes), 0);
  void* file = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(file, MAP_FAILED);
  const int64_t resident = host_resident_bytes(), anonymous = host_anonymous_resident_bytes();
  EXPECT_GT(anonymous, 0);
  EXPECT_LE(anonymous, resident);
  int64_t sum = 0;
  for (int64_t i = 0; i < bytes; i += 4096)
    sum += static_cast<const volatile char*>(file)[i];
  EXPECT_EQ(sum, 0);
  EXPECT_NEAR(static_cast<double>(host_resident_bytes() - resident), static_cast<double>(bytes),
              static_cast<double>(kLagBytes));
  EXPECT_NEAR(static_cast<double>(host_anonymous_resident_bytes() - anonymous), 0.0,
              static_cast<double>(kLagBytes));
  ::munmap(file, static_cast<size_t>(bytes));

  const int64_t before = host_anonymous_resident_bytes();
  mapping m(bytes);
  ASSERT_NE(m.p, MAP_FAILED);
  std::memset(m.p, 1, static_cast<size_t>(bytes));
  EXPECT_NEAR(static_cast<double>(host_anonymous_resident_bytes() - before),
              static_cast<double>(bytes), static_cast<double>(kLagBytes));
}

}  // namespace
