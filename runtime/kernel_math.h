// kernel_math: the per-element formulas the CPU kernels (runtime/cpu/)
// and their CUDA twins (runtime/cuda/kernels.cuh) share, one definition for
// host and device. Each caller brings its own exp (a vectorizable one on the
// CPU, expf on the GPU; both named exp_clamped), so these take exp's result.
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

// exp's argument is clamped to [kExpArgMin, kExpArgMax] by both backends'
// exp_clamped: exp stays finite and nonzero in fp32, so GELU's backward
// never meets inf * 0 for large |x|.
inline constexpr float kExpArgMin = -87.0f;
inline constexpr float kExpArgMax = 88.0f;

// LayerNorm's epsilon (GPT-2's, Hugging Face's 1e-5), on both backends.
inline constexpr float kLayerNormEps = 1e-5f;

// Gemma 2's soft-capping of attention scores and logits: x becomes
// X tanh(x / X) for a cap X > 0 (0: none); its slope at a capped value c is
// 1 - (c / X)^2.
FSDPGEN_HOST_DEVICE float softcap_of(float x, float cap) {
  return cap > 0.0f ? cap * tanhf(x / cap) : x;
}

FSDPGEN_HOST_DEVICE float softcap_slope(float c, float cap) {
  return cap > 0.0f ? 1.0f - (c / cap) * (c / cap) : 1.0f;
}

// GELU, tanh form (GPT-2): gelu(x) = 0.5 x (1 + tanh u) = x / (1 + exp(-2u)),
// u = sqrt(2/pi) (x + 0.044715 x^3).
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCube = 0.044715f;

// u of x; callers compute e = exp(-2u) and pass it to the two below.
FSDPGEN_HOST_DEVICE float gelu_tanh_arg(float x) {
  return kGeluScale * (x + kGeluCube * x * x * x);
}

FSDPGEN_HOST_DEVICE float gelu_of(float x, float e) {
  return x / (1.0f + e);
}

// d gelu/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx = s + 2 x s (1 - s) du/dx
// with s = 1 / (1 + e) and 1 - s = e s.
FSDPGEN_HOST_DEVICE float gelu_grad_of(float x, float e) {
  const float s = 1.0f / (1.0f + e);
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
  return s + 2.0f * x * du * s * (e * s);
}

// LayerNorm's input gradient of one element: rstd (dnorm - mean(dnorm) -
// xhat mean(dnorm xhat)), dnorm = dout * weight, the means over the row.
FSDPGEN_HOST_DEVICE float layernorm_dinp_of(float rstd, float dnorm, float xhat, float dnorm_mean,
                                            float dnorm_xhat_mean) {
  return rstd * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
}

// RMSNorm's input gradient of one element: LayerNorm's with no mean taken
// out, rstd (dnorm - xhat mean(dnorm xhat)), xhat = x rstd, dnorm = dout * weight.
FSDPGEN_HOST_DEVICE float rmsnorm_dinp_of(float rstd, float dnorm, float xhat,
                                          float dnorm_xhat_mean) {
  return layernorm_dinp_of(rstd, dnorm, xhat, 0.0f, dnorm_xhat_mean);
}

// SwiGLU (llama's MLP): silu(g) * u, silu(g) = g / (1 + exp(-g)). Callers
// pass e = exp(-g) (their exp_clamped).
FSDPGEN_HOST_DEVICE float swiglu_of(float g, float u, float e) {
  return g / (1.0f + e) * u;
}
// d/dg of silu(g) * u: u s (1 + g (1 - s)), s = sigmoid(g) = 1 / (1 + e);
// d/du is silu(g).
FSDPGEN_HOST_DEVICE float swiglu_dgate_of(float g, float u, float e) {
  const float s = 1.0f / (1.0f + e);
  return u * s * (1.0f + g * (1.0f - s));
}

// Gemma's embedding scale (scale_embedding): sqrt(width) rounded to fp32;
// a 16-bit run rounds it once more, to its dtype, as transformers does.
FSDPGEN_HOST_DEVICE float embedding_scale_of(int64_t width) {
  return static_cast<float>(sqrt(static_cast<double>(width)));
}

// Rotary positions, Hugging Face's rotate-half convention: the pair (x1, x2)
// = (x[i], x[i + D/2]) of a head turns by the angle whose cos and sin are c
// and s; the backward turns the gradient's pair back (the transpose).
FSDPGEN_HOST_DEVICE void rope_rotate(float& x1, float& x2, float c, float s) {
  const float y1 = x1 * c - x2 * s, y2 = x2 * c + x1 * s;
  x1 = y1;
  x2 = y2;
}
FSDPGEN_HOST_DEVICE void rope_unrotate(float& d1, float& d2, float c, float s) {
  rope_rotate(d1, d2, c, -s);
}
