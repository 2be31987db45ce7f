// copies: memcpy of `bytes` from one resident buffer to another.
#include "runtime/calibrate/copies.h"

#include <cstring>

#include "runtime/calibrate/buffers.h"

measurement measure_copy(const fsdpgen::profile::CopyTime& c, const measure_options& o) {
  host_buffer src(c.bytes), dst(c.bytes);
  std::memset(src.data(), 0x3c, static_cast<size_t>(c.bytes));
  return measure(o, [&] {
    return seconds_of([&] { std::memcpy(dst.data(), src.data(), static_cast<size_t>(c.bytes)); });
  });
}
