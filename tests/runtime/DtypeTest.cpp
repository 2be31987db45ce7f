// DtypeTest: fp16 conversions (runtime/dtype.h) against the compiler's own
// IEEE binary16 type (GCC's _Float16, rounded to nearest even by the
// compiler's runtime, an independent implementation): every one of the 65536
// fp16 values to fp32, and fp32 to fp16 for every fp16 value, every midpoint
// between neighbours (ties), the values just beside those midpoints, and
// random floats over fp32's whole range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "runtime/dtype.h"

namespace {

uint16_t bits_of(_Float16 h) {
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
_Float16 half_of(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, sizeof h);
  return h;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// fp16_from_float(f) must equal the compiler's rounding; NaNs need only stay NaN.
void expect_rounds_like_compiler(float f) {
  const uint16_t got = fp16_from_float(f).bits;
  const _Float16 want = static_cast<_Float16>(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(std::isnan(fp16_to_float(fp16{got}))) << "NaN became " << got;
    return;
  }
  ASSERT_EQ(got, bits_of(want)) << "fp16_from_float(" << f << ") (bits 0x" << std::hex << bits_of(f)
                                << ")";
}

TEST(Fp16, EveryValueWidensExactly) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = fp16_to_float(fp16{static_cast<uint16_t>(b)});
    const float want = static_cast<float>(half_of(static_cast<uint16_t>(b)));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    ASSERT_EQ(bits_of(got), bits_of(want)) << "fp16 bits " << b;
    // And back: every fp16 value survives the round trip.
    ASSERT_EQ(fp16_from_float(got).bits, b);
  }
}

TEST(Fp16, MidpointsAndNeighboursRoundToNearestEven) {
  for (uint32_t b = 0; b < 0x7c00; ++b) {  // finite non-negative values and their successors
    const double lo = static_cast<double>(fp16_to_float(fp16{static_cast<uint16_t>(b)}));
    // The next fp16 value up; past 65504 the rounding boundary is 65520 (as if 65536 existed).
    const double hi = b + 1 < 0x7c00
                          ? static_cast<double>(fp16_to_float(fp16{static_cast<uint16_t>(b + 1)}))
                          : 65536.0;
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in fp32
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      expect_rounds_like_compiler(f);
      expect_rounds_like_compiler(-f);
    }
  }
}

TEST(Fp16, RandomFloatsAndSpecials) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 2000000; ++i) {
    uint32_t b = any(rng);
    float f;
    std::memcpy(&f, &b, sizeof f);
    expect_rounds_like_compiler(f);
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {0.0f, -0.0f, inf, -inf, 65504.0f, 65519.99f, 65520.0f, 1e10f, 5.9604645e-8f,
                  2.9802322e-8f, 2.9802326e-8f, 1e-30f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::quiet_NaN()})
    expect_rounds_like_compiler(f);
  EXPECT_EQ(fp16_from_float(65520.0f).bits, 0x7c00) << "overflow is infinity";
  EXPECT_EQ(fp16_from_float(-inf).bits, 0xfc00);
}

TEST(Dtype, LoadAndStoreEveryType) {
  float f32[2] = {};
  bf16 b16[2] = {};
  fp16 h16[2] = {};
  for (auto [data, t] : {std::pair<void*, dtype_id>{f32, dtype_id::fp32},
                         {b16, dtype_id::bf16},
                         {h16, dtype_id::fp16}}) {
    dtype_store(data, t, 1, 1.5f);
    EXPECT_EQ(dtype_load(data, t, 1), 1.5f) << dtype_name(t);
    EXPECT_EQ(dtype_load(data, t, 0), 0.0f) << dtype_name(t);
  }
  EXPECT_EQ(dtype_size(dtype_id::fp16), 2);
  EXPECT_STREQ(dtype_name(dtype_id::fp16), "fp16");
}

}  // namespace
