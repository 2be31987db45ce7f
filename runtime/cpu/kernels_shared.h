// kernels_shared: what the CPU kernels (runtime/kernels_*.cpp, see kernels.h)
// share: when a loop goes parallel, an exp that vectorizes, and race-free
// accumulation into parameter gradients. Header-only: the kernels inline them.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "runtime/dtype.h"
#include "runtime/kernel_math.h"

// Below this many elements an elementwise loop runs on one thread.
inline constexpr int64_t kParallelElems = 1 << 14;
// Channels one thread reduces over all rows (parameter-gradient column sums).
inline constexpr int64_t kChannelBlock = 64;

// exp(x), x clamped to [kExpArgMin, kExpArgMax] (runtime/kernel_math.h), within ~1 ulp: Cephes'
// expf (reduction by ln 2 in two parts, degree-5 polynomial, 2^n by exponent bits). Branch-free and
// rounding by adding 1.5 * 2^23 (floor and float-to-int conversions keep GCC from vectorizing under
// trapping math), so loops over it vectorize, which loops over std::exp do not without -ffast-math.
inline float exp_clamped(float x) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  x = std::min(std::max(x, kExpArgMin), kExpArgMax);
  const float t = x * 1.44269504088896341f + kRound;  // round(x / ln 2) in the low bits
  const float n = t - kRound;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;  // x - n ln 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const int32_t biased = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kRound) + 127;
  return (p * r * r + r + 1.0f) * std::bit_cast<float>(biased << 23);  // exp(r) 2^n
}

// dst[c] += acc[c] for c in [0, n), one rounding per element.
template <class G>
void accumulate_row(G* dst, const float* acc, int64_t n) {
  for (int64_t c = 0; c < n; c++)
    dst[c] = from_float<G>(to_float(dst[c]) + acc[c]);
}

// dst[c] += sum over rows n of src[n, c], for the C columns of an (N, C)
// matrix; a thread owns a block of columns, so nothing races.
template <class T, class G>
void column_sums_accumulate(G* dst, const T* src, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
    const int64_t w = std::min(kChannelBlock, C - c0);
    float acc[kChannelBlock] = {};
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < w; c++)
        acc[c] += to_float(src[n * C + c0 + c]);
    accumulate_row(dst + c0, acc, w);
  }
}
