// rope: rotary position embeddings (llama) as Hugging Face computes them:
// the inverse frequencies 1 / theta^(2i/D) of a head of size D, optionally
// rescaled as Llama 3.1 does (transformers' rope_type "llama3") or divided by
// a factor (rope_type "linear": Gemma 3 4B's and larger's global layers), their
// cos/sin tables over the context (fp32, built once at start into the plan's
// rope_tables buffer), and the rotation of q and k by position in place.
#pragma once

#include <cstdint>
#include <vector>

// The frequency scaling; factor 0 means none. Llama 3.1's: wavelengths 2 pi / f
// above original_context / low_freq are divided by factor, those below
// original_context / high_freq kept, those between interpolated smoothly.
// Linear's (position interpolation): every frequency divided by factor, as
// if each position were position / factor; it reads no other field.
struct rope_scaling {
  double factor = 0.0;
  double low_freq = 0.0;
  double high_freq = 0.0;
  int64_t original_context = 0;
  bool linear = false;
};

// The D / 2 inverse frequencies, in fp32 as transformers computes them.
// std::invalid_argument for an odd or empty head, theta <= 0, or a scaling
// (factor > 0) outside 1 <= factor (and for llama3's 0 < low_freq < high_freq,
// context > 0).
std::vector<float> rope_inv_freq(int64_t D, double theta, const rope_scaling& scaling);

// cos[t * D/2 + i] and sin[...] of angle t * inv_freq[i] (fp32 product, as
// transformers' fp32 matmul), for t in [0, T).
void rope_tables(float* cos, float* sin, int64_t T, int64_t D, double theta,
                 const rope_scaling& scaling);

// x (N, heads * D), row n at position n % T: each head's pairs (i, i + D/2)
// rotated by position's angle at frequency i, in place. std::invalid_argument
// for an odd or empty head or T_ <= 0.
template <class T>
void rope_forward(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                  int64_t D);
// The gradient through rope_forward: dx (N, heads * D) turned back in place.
template <class T>
void rope_backward(T* dx, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                   int64_t D);
