// FNV-1a 64: the one hash of bytes the runtime and the compiler keep (each
// tensor's initialization stream by its name, the --trace-data lines' token
// hashes, the custom-layer cache's keys). Header-only, so that any library
// at or above the runtime (tools/check_layers.py) includes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

inline constexpr uint64_t kFnv1aBasis = 0xcbf29ce484222325ull;  // 14695981039346656037
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;       // 1099511628211

// Bytes [data, data + n) hashed on from `h` (kFnv1aBasis starts a hash).
inline uint64_t fnv1a_bytes(const void* data, size_t n, uint64_t h = kFnv1aBasis) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aBasis) {
  return fnv1a_bytes(s.data(), s.size(), h);
}

// Token ids as int32 little-endian bytes, on a machine of either byte order.
inline uint64_t fnv1a_ids(const int32_t* ids, int64_t n, uint64_t h = kFnv1aBasis) {
  for (int64_t i = 0; i < n; ++i)
    for (int b = 0; b < 4; ++b)
      h = (h ^ ((static_cast<uint32_t>(ids[i]) >> (8 * b)) & 0xffu)) * kFnv1aPrime;
  return h;
}
