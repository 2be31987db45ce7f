// red_zones: canaries and AddressSanitizer poisoning around every buffer; see
// red_zones.h.
#include "runtime/cpu/red_zones.h"

#include <cstdint>
#include <cstring>

#include <fmt/format.h>

// AddressSanitizer's manual poisoning, where the binary links it (this
// library is not instrumented itself: these are weak, null without ASan).
extern "C" {
void __asan_poison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));
void __asan_unpoison_memory_region(void const volatile* addr, size_t size) __attribute__((weak));
}

namespace {

constexpr unsigned char kCanary = 0xfd;

std::byte* base_of(const program_buffer& b, std::byte* device, std::byte* host) {
  return (b.space == memory_space::device ? device : host) + b.offset;
}

// The two zones of buffer b: [data - red, data) and [data + bytes rounded up, + red).
struct zones {
  std::byte* before;
  std::byte* after;
  size_t bytes;
};

zones zones_of(const program& p, const program_buffer& b, std::byte* device, std::byte* host) {
  std::byte* data = base_of(b, device, host);
  const size_t red = static_cast<size_t>(p.plan.red_zone_bytes);
  return {data - red, data + b.bytes, red};
}

void poison(std::byte* at, size_t n, bool on) {
  if (on && __asan_poison_memory_region) __asan_poison_memory_region(at, n);
  if (!on && __asan_unpoison_memory_region) __asan_unpoison_memory_region(at, n);
}

// The first byte of [at, at + n) that is not the canary; -1 when none.
int64_t changed(const std::byte* at, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (at[i] != std::byte{kCanary}) return static_cast<int64_t>(i);
  return -1;
}

void arm(std::byte* at, size_t n) {
  poison(at, n, false);
  std::memset(at, kCanary, n);
  poison(at, n, true);
}

}  // namespace

void red_zones_arm(const program& p, std::byte* device, std::byte* host, int op) {
  for (int id = 0; id < p.buffer_count; ++id) {
    if (p.buffer_life[id].first_op != op) continue;
    const zones z = zones_of(p, p.buffers[id], device, host);
    arm(z.before, z.bytes);
    arm(z.after, z.bytes);
  }
  for (int i = 0; i < p.inner_red_zone_count; ++i) {
    const program_red_zone& r = p.inner_red_zones[i];
    if (p.buffer_life[r.buffer].first_op == op)
      arm(base_of(p.buffers[r.buffer], device, host) + r.offset, static_cast<size_t>(r.bytes));
  }
}

void red_zones_check(const program& p, std::byte* device, std::byte* host, int op) {
  // Inside buffers first: a custom array overrun stays within its buffer.
  for (int i = 0; i < p.inner_red_zone_count; ++i) {
    const program_red_zone& r = p.inner_red_zones[i];
    const program_buffer_life& life = p.buffer_life[r.buffer];
    if (op < life.first_op || op > life.last_op) continue;
    const program_buffer& b = p.buffers[r.buffer];
    const std::byte* at = base_of(b, device, host) + r.offset;
    if (const int64_t c = changed(at, static_cast<size_t>(r.bytes)); c >= 0)
      throw red_zone_error(fmt::format(
          "--check: op {} ({}) wrote past the end of the custom layer array '{}' (in buffer "
          "'{}'): byte {} of the red zone after it changed; is the array declared smaller than "
          "the layer writes it? `fsdpgen check-layer` names the line",
          op, p.ops[op].label, r.name, b.name, c));
    if (op == life.last_op)
      poison(base_of(b, device, host) + r.offset, static_cast<size_t>(r.bytes), false);
  }
  for (int id = 0; id < p.buffer_count; ++id) {
    const program_buffer_life& life = p.buffer_life[id];
    if (op < life.first_op || op > life.last_op) continue;
    const program_buffer& b = p.buffers[id];
    const zones z = zones_of(p, b, device, host);
    const int64_t after = changed(z.after, z.bytes), before = changed(z.before, z.bytes);
    if (after >= 0 || before >= 0) {
      const program_op& o = p.ops[op];
      throw red_zone_error(fmt::format(
          "--check: op {} ({}) wrote {} buffer '{}' ({} arena, {} bytes at offset {}): byte {} "
          "of its red zone changed; the op's own line is found by running this binary under "
          "gdb with a watchpoint there, or, for a custom layer, by `fsdpgen check-layer`",
          op, o.label, after >= 0 ? "past the end of" : "before the start of", b.name,
          b.space == memory_space::device ? "device" : "host", b.bytes, b.offset,
          after >= 0 ? after : before - static_cast<int64_t>(z.bytes)));
    }
    if (op == life.last_op) {  // freed: the next buffers here arm their own zones
      poison(z.before, z.bytes, false);
      poison(z.after, z.bytes, false);
    }
  }
}
