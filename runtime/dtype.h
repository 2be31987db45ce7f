// dtype: the element types the runtime stores. bf16 is kept as its 16 bits
// (the top half of an IEEE float) and converted to fp32 inside kernels;
// rounding is to nearest even, as PyTorch and CUDA do.
#pragma once

#include <cstdint>
#include <cstring>

struct bf16 {
  uint16_t bits;
};

inline float bf16_to_float(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline bf16 bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))  // NaN stays a (quiet) NaN
    return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// Uniform loads and stores for kernels templated on the element type.
inline float to_float(float x) {
  return x;
}
inline float to_float(bf16 x) {
  return bf16_to_float(x);
}
template <class T>
inline T from_float(float x);
template <>
inline float from_float<float>(float x) {
  return x;
}
template <>
inline bf16 from_float<bf16>(float x) {
  return bf16_from_float(x);
}

// The dtypes a buffer can hold; names as in the spec language.
enum class dtype_id : int { fp32 = 0, bf16 = 1 };
inline int64_t dtype_size(dtype_id d) {
  return d == dtype_id::fp32 ? 4 : 2;
}
inline const char* dtype_name(dtype_id d) {
  return d == dtype_id::fp32 ? "fp32" : "bf16";
}
