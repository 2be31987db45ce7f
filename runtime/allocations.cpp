// allocations: glibc's allocator entry points and the operator new family,
// each charging one allocation to its caller while counting is on and then
// calling glibc's own (__libc_*). An executable that links this file
// resolves every library's malloc to these (the dynamic linker binds the
// executable's definitions first); free and operator delete stay glibc's and
// libstdc++'s, which free what __libc_* returned. In a binary built with
// AddressSanitizer (`fsdpgen build --check`) they call its allocator instead
// (__interceptor_*, whose free and delete then stand in front of glibc's).
#include "runtime/allocations.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>
#include <set>

extern "C" {
void* __libc_malloc(size_t bytes);
void* __libc_calloc(size_t count, size_t bytes);
void* __libc_realloc(void* p, size_t bytes);
void* __libc_memalign(size_t alignment, size_t bytes);
void* __libc_valloc(size_t bytes);
void* __libc_pvalloc(size_t bytes);
// AddressSanitizer's allocator, where the binary links it (else null).
void* __interceptor_malloc(size_t bytes) __attribute__((weak));
void* __interceptor_calloc(size_t count, size_t bytes) __attribute__((weak));
void* __interceptor_realloc(void* p, size_t bytes) __attribute__((weak));
void* __interceptor_memalign(size_t alignment, size_t bytes) __attribute__((weak));
void* __interceptor_valloc(size_t bytes) __attribute__((weak));
void* __interceptor_pvalloc(size_t bytes) __attribute__((weak));
}
// This executable's code, as the linker lays it out.
extern "C" const char __executable_start[];
extern "C" const char etext[];

namespace {

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_own{0}, g_libraries{0};
// The first distinct library call sites seen, named only when reported.
constexpr int kCallSites = 16;
std::atomic<const void*> g_call_sites[kCallSites];

void remember_call_site(const void* caller) {
  for (auto& slot : g_call_sites) {
    const void* seen = slot.load(std::memory_order_relaxed);
    if (seen == caller) return;
    if (!seen && slot.compare_exchange_strong(seen, caller)) return;
    if (seen == caller) return;
  }
}

inline void note(const void* caller) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  const char* c = static_cast<const char*>(caller);
  if (c >= __executable_start && c < etext) {
    g_own.fetch_add(1, std::memory_order_relaxed);
  } else {
    g_libraries.fetch_add(1, std::memory_order_relaxed);
    remember_call_site(caller);
  }
}

#define CALLER __builtin_return_address(0)

// The allocator behind the counting: AddressSanitizer's where linked, else glibc's.
void* real_malloc(size_t bytes) {
  return __interceptor_malloc ? __interceptor_malloc(bytes) : __libc_malloc(bytes);
}
void* real_calloc(size_t count, size_t bytes) {
  return __interceptor_calloc ? __interceptor_calloc(count, bytes) : __libc_calloc(count, bytes);
}
void* real_realloc(void* p, size_t bytes) {
  return __interceptor_realloc ? __interceptor_realloc(p, bytes) : __libc_realloc(p, bytes);
}
void* real_memalign(size_t alignment, size_t bytes) {
  return __interceptor_memalign ? __interceptor_memalign(alignment, bytes)
                                : __libc_memalign(alignment, bytes);
}
void* real_valloc(size_t bytes) {
  return __interceptor_valloc ? __interceptor_valloc(bytes) : __libc_valloc(bytes);
}
void* real_pvalloc(size_t bytes) {
  return __interceptor_pvalloc ? __interceptor_pvalloc(bytes) : __libc_pvalloc(bytes);
}

bool valid_alignment(size_t alignment) {
  return alignment >= sizeof(void*) && (alignment & (alignment - 1)) == 0;
}

void* new_or_throw(void* p) {
  if (!p) throw std::bad_alloc();
  return p;
}

}  // namespace

void allocations_count(bool on) {
  g_counting.store(on);
}

allocations_counted allocations_so_far() {
  return {g_own.load(), g_libraries.load()};
}

std::string allocations_library_names() {
  std::set<std::string> names;
  for (const auto& slot : g_call_sites) {
    const void* site = slot.load();
    Dl_info info{};
    if (!site || !dladdr(site, &info) || !info.dli_fname) continue;
    std::string path = info.dli_fname;
    names.insert(path.substr(path.rfind('/') + 1));
  }
  std::string out;
  for (const std::string& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

extern "C" {

void* malloc(size_t bytes) noexcept {
  note(CALLER);
  return real_malloc(bytes);
}

void* calloc(size_t count, size_t bytes) noexcept {
  note(CALLER);
  return real_calloc(count, bytes);
}

void* realloc(void* p, size_t bytes) noexcept {
  note(CALLER);
  return real_realloc(p, bytes);
}

void* memalign(size_t alignment, size_t bytes) noexcept {
  note(CALLER);
  return real_memalign(alignment, bytes);
}

void* aligned_alloc(size_t alignment, size_t bytes) noexcept {
  note(CALLER);
  return real_memalign(alignment, bytes);
}

int posix_memalign(void** out, size_t alignment, size_t bytes) noexcept {
  if (!valid_alignment(alignment)) return EINVAL;
  note(CALLER);
  void* p = real_memalign(alignment, bytes);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void* valloc(size_t bytes) noexcept {
  note(CALLER);
  return real_valloc(bytes);
}

void* pvalloc(size_t bytes) noexcept {
  note(CALLER);
  return real_pvalloc(bytes);
}

}  // extern "C"

// The operator new family, so that C++ allocations are charged to the code
// that made them rather than to libstdc++.
void* operator new(size_t bytes) {
  note(CALLER);
  return new_or_throw(real_malloc(bytes ? bytes : 1));
}
void* operator new[](size_t bytes) {
  note(CALLER);
  return new_or_throw(real_malloc(bytes ? bytes : 1));
}
void* operator new(size_t bytes, const std::nothrow_t&) noexcept {
  note(CALLER);
  return real_malloc(bytes ? bytes : 1);
}
void* operator new[](size_t bytes, const std::nothrow_t&) noexcept {
  note(CALLER);
  return real_malloc(bytes ? bytes : 1);
}
void* operator new(size_t bytes, std::align_val_t a) {
  note(CALLER);
  return new_or_throw(real_memalign(static_cast<size_t>(a), bytes ? bytes : 1));
}
void* operator new[](size_t bytes, std::align_val_t a) {
  note(CALLER);
  return new_or_throw(real_memalign(static_cast<size_t>(a), bytes ? bytes : 1));
}
void* operator new(size_t bytes, std::align_val_t a, const std::nothrow_t&) noexcept {
  note(CALLER);
  return real_memalign(static_cast<size_t>(a), bytes ? bytes : 1);
}
void* operator new[](size_t bytes, std::align_val_t a, const std::nothrow_t&) noexcept {
  note(CALLER);
  return real_memalign(static_cast<size_t>(a), bytes ? bytes : 1);
}
