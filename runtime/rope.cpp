// rope: inverse frequencies, tables and the in-place rotation.
#include "runtime/rope.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/dtype.h"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"

namespace {

constexpr int64_t kParallelElems = 1 << 14;
constexpr float kPi = 3.14159265358979323846f;

// Rotation pairs x[i] with x[i + D/2]: an odd or empty head has no such pairing.
void check_head_size(const char* what, int64_t D) {
  if (D <= 0 || D % 2 != 0)
    throw std::invalid_argument(std::string(what) + ": head size " + std::to_string(D) +
                                " is not a positive even number");
}

// Both scalings need 1 <= factor (transformers' validation); llama3's also
// 0 < low_freq < high_freq and a positive original context (else its
// wavelength bounds divide by zero).
void check_scaling(const rope_scaling& s) {
  if (s.linear && s.factor < 1)
    throw std::invalid_argument("rope_inv_freq: linear scaling needs factor >= 1; got factor " +
                                std::to_string(s.factor));
  if (s.linear) return;
  if (s.factor < 1 || s.low_freq <= 0 || s.high_freq <= s.low_freq || s.original_context <= 0)
    throw std::invalid_argument(
        "rope_inv_freq: llama3 scaling needs factor >= 1, 0 < low_freq < high_freq and "
        "original_context > 0; got factor " +
        std::to_string(s.factor) + ", low_freq " + std::to_string(s.low_freq) + ", high_freq " +
        std::to_string(s.high_freq) + ", original_context " + std::to_string(s.original_context));
}

// Each head's pairs of row n turned by `turn` (rope_rotate or rope_unrotate).
template <class T, class Turn>
void rope_apply(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                int64_t D, Turn turn) {
  check_head_size("rope", D);
  if (T_ <= 0)
    throw std::invalid_argument("rope: context " + std::to_string(T_) + " is not positive");
  const int64_t half = D / 2;
#pragma omp parallel for if (N * heads * D >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    const float* c = cos + (n % T_) * half;
    const float* s = sin + (n % T_) * half;
    for (int64_t h = 0; h < heads; h++) {
      T* row = x + (n * heads + h) * D;
      for (int64_t i = 0; i < half; i++) {
        float x1 = to_float(row[i]), x2 = to_float(row[i + half]);
        turn(x1, x2, c[i], s[i]);
        row[i] = from_float<T>(x1);
        row[i + half] = from_float<T>(x2);
      }
    }
  }
}

}  // namespace

std::vector<float> rope_inv_freq(int64_t D, double theta, const rope_scaling& scaling) {
  check_head_size("rope_inv_freq", D);
  if (!(theta > 0))
    throw std::invalid_argument("rope_inv_freq: theta " + std::to_string(theta) +
                                " is not positive");
  if (scaling.factor > 0) check_scaling(scaling);
  std::vector<float> f(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; i++)
    f[i] = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * i) / D));
  if (scaling.factor <= 0) return f;
  const auto factor = static_cast<float>(scaling.factor);
  // transformers' _compute_linear_scaling_rope_parameters: fp32 inv_freq / factor.
  if (scaling.linear) {
    for (float& inv : f)
      inv /= factor;
    return f;
  }
  // transformers' _compute_llama3_parameters, in fp32 like its tensors.
  const auto low = static_cast<float>(scaling.low_freq),
             high = static_cast<float>(scaling.high_freq);
  const auto old_context = static_cast<float>(scaling.original_context);
  const float low_freq_wavelen = old_context / low, high_freq_wavelen = old_context / high;
  for (float& inv : f) {
    const float wavelen = 2.0f * kPi / inv;
    const float scaled = wavelen > low_freq_wavelen ? inv / factor : inv;
    if (wavelen < high_freq_wavelen || wavelen > low_freq_wavelen) {
      inv = scaled;
      continue;
    }
    const float smooth = (old_context / wavelen - low) / (high - low);
    inv = (1.0f - smooth) * scaled / factor + smooth * scaled;
  }
  return f;
}

void rope_tables(float* cos, float* sin, int64_t T, int64_t D, double theta,
                 const rope_scaling& scaling) {
  const std::vector<float> f = rope_inv_freq(D, theta, scaling);
  const int64_t half = D / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      const float angle = static_cast<float>(t) * f[i];
      cos[t * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin[t * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

template <class T>
void rope_forward(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                  int64_t D) {
  rope_apply(x, cos, sin, N, T_, heads, D,
             [](float& a, float& b, float c, float s) { rope_rotate(a, b, c, s); });
}

template <class T>
void rope_backward(T* dx, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                   int64_t D) {
  rope_apply(dx, cos, sin, N, T_, heads, D,
             [](float& a, float& b, float c, float s) { rope_unrotate(a, b, c, s); });
}

#define ROPE_INSTANTIATE(T)                                                                 \
  template void rope_forward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t,  \
                                int64_t);                                                   \
  template void rope_backward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t, \
                                 int64_t);

FSDPGEN_FOR_EACH_DTYPE(ROPE_INSTANTIATE)
