// dtype: the element types the runtime stores. bf16 is kept as its 16 bits
// (the top half of an IEEE float) and fp16 as IEEE binary16 bits; both are
// converted to fp32 inside kernels, rounding to nearest even as PyTorch and
// CUDA do. fp16 overflows to infinity above 65504 (which dynamic loss scaling
// detects, runtime/train/loss_scale.h); bf16 has fp32's range.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/host_device.h"

struct bf16 {
  uint16_t bits;
};

FSDPGEN_HOST_DEVICE float bf16_to_float(bf16 x) {
  uint32_t u = static_cast<uint32_t>(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

FSDPGEN_HOST_DEVICE bf16 bf16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))  // NaN stays a (quiet) NaN
    return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bf16{static_cast<uint16_t>(u >> 16)};
}

struct fp16 {
  uint16_t bits;
};

FSDPGEN_HOST_DEVICE float fp16_to_float(fp16 x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu, mant = x.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, sizeof u);
    u |= sign;
  } else if (exp == 31) {  // infinity or NaN (payload kept)
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

FSDPGEN_HOST_DEVICE fp16 fp16_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x47800000u)  // |f| >= 65536, infinity or NaN
    return fp16{static_cast<uint16_t>(sign | (u > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (u < 0x38800000u) {
    // Below 2^-14: a subnormal (or zero) in fp16. Adding 0.5 leaves the value
    // in units of 2^-24 in the low mantissa bits, rounded to nearest even by
    // the fp32 addition itself.
    float a;
    std::memcpy(&a, &u, sizeof a);
    a += 0.5f;
    uint32_t r;
    std::memcpy(&r, &a, sizeof r);
    return fp16{static_cast<uint16_t>(sign | (r - 0x3f000000u))};
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even;
  // a carry out of the mantissa moves to the exponent (65520 and up -> inf).
  const uint32_t odd = (u >> 13) & 1u;
  u += 0xc8000fffu + odd;  // (15 - 127) << 23, plus the rounding bias
  return fp16{static_cast<uint16_t>(sign | (u >> 13))};
}

// Uniform loads and stores for kernels templated on the element type; the
// CUDA kernels add the device types' overloads (runtime/cuda/device.cuh).
FSDPGEN_HOST_DEVICE float to_float(float x) {
  return x;
}
FSDPGEN_HOST_DEVICE float to_float(bf16 x) {
  return bf16_to_float(x);
}
FSDPGEN_HOST_DEVICE float to_float(fp16 x) {
  return fp16_to_float(x);
}
template <class T>
FSDPGEN_HOST_DEVICE T from_float(float x);
template <>
FSDPGEN_HOST_DEVICE float from_float<float>(float x) {
  return x;
}
template <>
FSDPGEN_HOST_DEVICE bf16 from_float<bf16>(float x) {
  return bf16_from_float(x);
}
template <>
FSDPGEN_HOST_DEVICE fp16 from_float<fp16>(float x) {
  return fp16_from_float(x);
}

// The dtypes a buffer can hold; names as in the spec language.
enum class dtype_id : int { fp32 = 0, bf16 = 1, fp16 = 2 };
inline int64_t dtype_size(dtype_id d) {
  return d == dtype_id::fp32 ? 4 : 2;
}
inline const char* dtype_name(dtype_id d) {
  return d == dtype_id::fp32 ? "fp32" : d == dtype_id::bf16 ? "bf16" : "fp16";
}

// Element i of an array of dtype t, as fp32; and stored from fp32.
inline float dtype_load(const void* data, dtype_id t, int64_t i) {
  switch (t) {
    case dtype_id::fp32:
      return static_cast<const float*>(data)[i];
    case dtype_id::bf16:
      return bf16_to_float(static_cast<const bf16*>(data)[i]);
    case dtype_id::fp16:
      break;
  }
  return fp16_to_float(static_cast<const fp16*>(data)[i]);
}
inline void dtype_store(void* data, dtype_id t, int64_t i, float v) {
  switch (t) {
    case dtype_id::fp32:
      static_cast<float*>(data)[i] = v;
      return;
    case dtype_id::bf16:
      static_cast<bf16*>(data)[i] = bf16_from_float(v);
      return;
    case dtype_id::fp16:
      static_cast<fp16*>(data)[i] = fp16_from_float(v);
      return;
  }
}
