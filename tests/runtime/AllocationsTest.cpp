// allocations: every door into the heap is counted while counting is on,
// charged to this executable's code or to the shared library that asked,
// and nothing is counted while it is off.
#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "runtime/allocations.h"

namespace {

// The counts an action adds while counting is on.
template <class F>
allocations_counted counted_during(F f) {
  const allocations_counted before = allocations_so_far();
  allocations_count(true);
  f();
  allocations_count(false);
  const allocations_counted after = allocations_so_far();
  return {after.own - before.own, after.libraries - before.libraries};
}

// Kept from the optimizer: the pointer escapes, so each call really allocates.
void* volatile g_sink;

TEST(Allocations, EveryCDoorCountsOnceAsOurs) {
  struct door {
    const char* name;
    void (*call)();
  };
  const door doors[] = {
      {"malloc",
       [] {
         g_sink = std::malloc(100);
         std::free(g_sink);
       }},
      {"calloc",
       [] {
         g_sink = std::calloc(10, 10);
         std::free(g_sink);
       }},
      {"realloc",
       [] {
         g_sink = std::realloc(nullptr, 100);
         std::free(g_sink);
       }},
      {"aligned_alloc",
       [] {
         g_sink = std::aligned_alloc(64, 128);
         std::free(g_sink);
       }},
      {"posix_memalign",
       [] {
         void* p = nullptr;
         if (posix_memalign(&p, 64, 100) == 0) g_sink = p;
         std::free(p);
       }},
      {"memalign",
       [] {
         g_sink = memalign(64, 100);
         std::free(g_sink);
       }},
      {"valloc",
       [] {
         g_sink = valloc(100);
         std::free(g_sink);
       }},
  };
  for (const door& d : doors) {
    const allocations_counted c = counted_during(d.call);
    EXPECT_EQ(c.own, 1) << d.name;
    EXPECT_EQ(c.libraries, 0) << d.name;
  }
}

TEST(Allocations, EveryOperatorNewCountsOnceAsOurs) {
  struct alignas(64) wide {
    char bytes[64];
  };
  // Each pointer escapes through g_sink, so that the compiler cannot elide the pair.
  const allocations_counted plain = counted_during([] {
    int* p = new int(1);
    g_sink = p;
    delete p;
  });
  const allocations_counted array = counted_during([] {
    int* p = new int[8];
    g_sink = p;
    delete[] p;
  });
  const allocations_counted aligned = counted_during([] {
    wide* p = new wide;
    g_sink = p;
    delete p;
  });
  const allocations_counted nothrow = counted_during([] {
    int* p = new (std::nothrow) int(1);
    g_sink = p;
    delete p;
  });
  const allocations_counted vector = counted_during([] {
    std::vector<int> v;
    for (int i = 0; i < 1000; ++i)
      v.push_back(i);  // grows several times
    g_sink = v.data();
  });
  EXPECT_EQ(plain.own, 1);
  EXPECT_EQ(array.own, 1);
  EXPECT_EQ(aligned.own, 1);
  EXPECT_EQ(nothrow.own, 1);
  EXPECT_GE(vector.own, 2);
  EXPECT_EQ(plain.libraries + array.libraries + aligned.libraries + nothrow.libraries, 0);
}

TEST(Allocations, ALibrarysAllocationIsChargedToTheLibrary) {
  // strdup is libc's: its malloc call comes from libc.so.
  const allocations_counted c = counted_during([] {
    char* s = strdup("a string libc copies");
    g_sink = s;
    std::free(s);
  });
  EXPECT_EQ(c.own, 0);
  EXPECT_EQ(c.libraries, 1);
  EXPECT_NE(allocations_library_names().find("libc.so"), std::string::npos)
      << allocations_library_names();
}

TEST(Allocations, NothingIsCountedWhileOff) {
  const allocations_counted before = allocations_so_far();
  g_sink = std::malloc(100);
  std::free(g_sink);
  delete new int(2);
  const allocations_counted after = allocations_so_far();
  EXPECT_EQ(after.own, before.own);
  EXPECT_EQ(after.libraries, before.libraries);
}

TEST(Allocations, BadAlignmentIsRefusedAsGlibcDoes) {
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(posix_memalign(&p, 3, 100), EINVAL);
  EXPECT_EQ(p, reinterpret_cast<void*>(1)) << "untouched on failure";
}

}  // namespace
