// LlamaCases: what the llama kernel tests (LlamaKernelTest, RopeTest)
// share: double-precision references of the llama family's kernels, written
// independently of runtime/, their analytic gradients, and the typed suites.
// The suites' fixtures are here, outside an anonymous namespace, because
// their tests live in both files and GoogleTest requires one fixture class
// per suite.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <vector>

#include "tests/runtime/Reference.h"

namespace llama_cases {

using ref::vec;

// ---------------------------------------------------------------- references

// y = x / sqrt(mean(x^2) + eps) * w, per row.
inline vec rmsnorm(const vec& x, const vec& w, int64_t N, int64_t C, double eps) {
  vec y(x.size());
  for (int64_t n = 0; n < N; n++) {
    double ss = 0;
    for (int64_t c = 0; c < C; c++)
      ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; c++)
      y[n * C + c] = x[n * C + c] * r * w[c];
  }
  return y;
}

inline vec swiglu(const vec& gate, const vec& up) {
  vec y(gate.size());
  for (size_t i = 0; i < gate.size(); i++)
    y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

// Each head's pair (x[i], x[i + D/2]) as the complex number x[i] + j x[i + D/2],
// times e^{j turn t f_i} with f_i = theta^(-2i/D) (no scaling); turn -1 is
// the inverse rotation.
inline vec rope(const vec& x, int64_t N, int64_t T, int64_t heads, int64_t D, double theta,
                double turn = 1.0) {
  vec y(x.size());
  const int64_t half = D / 2;
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < heads; h++)
      for (int64_t i = 0; i < half; i++) {
        const int64_t at = (n * heads + h) * D;
        const double angle = turn * static_cast<double>(n % T) * std::pow(theta, -2.0 * i / D);
        const std::complex<double> z =
            std::complex<double>(x[at + i], x[at + i + half]) * std::polar(1.0, angle);
        y[at + i] = z.real();
        y[at + i + half] = z.imag();
      }
  return y;
}

// Causal softmax attention with k and v repeated for each query head: head h
// reads kv head h / (H / KV). q, out (N, H*hs); k, v (N, KV*hs). With a
// window W > 0 query t sees key u only where t - u < W (transformers'
// sliding-window mask); its other scores are -infinity. Scores are scale q . k
// (scale 0: 1 / sqrt(hs)), with a softcap X > 0 then X tanh(score / X)
// (Gemma 2's eager attention).
inline vec gqa(const vec& q, const vec& k, const vec& v, int64_t B, int64_t T, int64_t H,
               int64_t KV, int64_t hs, int64_t window = 0, double scale = 0, double softcap = 0) {
  vec out(q.size(), 0.0);
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(hs));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / (H / KV);
      for (int64_t t = 0; t < T; t++) {
        std::vector<double> s(t + 1, -INFINITY);
        double m = -1e300;
        for (int64_t u = 0; u <= t; u++) {
          if (window > 0 && t - u >= window) continue;
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += q[((b * T + t) * H + h) * hs + c] * k[((b * T + u) * KV + g) * hs + c];
          s[u] = softcap > 0 ? softcap * std::tanh(d * scale / softcap) : d * scale;
          m = std::max(m, s[u]);
        }
        double sum = 0;
        for (double& e : s)
          sum += (e = std::exp(e - m));
        for (int64_t u = 0; u <= t; u++)
          for (int64_t c = 0; c < hs; c++)
            out[((b * T + t) * H + h) * hs + c] += s[u] / sum * v[((b * T + u) * KV + g) * hs + c];
      }
    }
  return out;
}

// Gradients of sum(rmsnorm(x, w) * R): with r = (mean(x^2) + eps)^(-1/2) per
// row, dx_j = r w_j R_j - r^3 x_j / C sum_c R_c w_c x_c and dw_c = sum over
// rows of R_c x_c r.
inline void rmsnorm_grads(const vec& x, const vec& w, const vec& R, int64_t N, int64_t C,
                          double eps, vec* dx, vec* dw) {
  dx->assign(x.size(), 0.0);
  dw->assign(C, 0.0);
  for (int64_t n = 0; n < N; n++) {
    const double* xr = &x[n * C];
    const double* Rr = &R[n * C];
    double ss = 0, rwx = 0;
    for (int64_t c = 0; c < C; c++) {
      ss += xr[c] * xr[c];
      rwx += Rr[c] * w[c] * xr[c];
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; c++) {
      (*dx)[n * C + c] = r * w[c] * Rr[c] - r * r * r * xr[c] * rwx / static_cast<double>(C);
      (*dw)[c] += Rr[c] * xr[c] * r;
    }
  }
}

// Gradients of sum(gqa(q, k, v) * R), per query head h on kv head g = h /
// (H / KV), as for multi-head attention on k and v repeated: P the causal
// softmax of scale q k^T, dP = R v^T, dS = P (dP - rowsum(P dP)), dq = scale
// dS k, and the group's dk = scale dS^T q and dv = P^T R summed into kv head g.
// With a window W > 0, P is 0 where t - u >= W (as gqa's).
inline void gqa_grads(const vec& q, const vec& k, const vec& v, const vec& R, int64_t B, int64_t T,
                      int64_t H, int64_t KV, int64_t hs, vec* dq, vec* dk, vec* dv,
                      int64_t window = 0) {
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  auto qa = [&](int64_t b, int64_t t, int64_t h) { return ((b * T + t) * H + h) * hs; };
  auto ka = [&](int64_t b, int64_t u, int64_t g) { return ((b * T + u) * KV + g) * hs; };
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t g = h / (H / KV);
      for (int64_t t = 0; t < T; t++) {
        vec p(t + 1, -INFINITY), dp(t + 1);
        double m = -1e300, sum = 0, pdp = 0;
        for (int64_t u = 0; u <= t; u++) {
          if (window > 0 && t - u >= window) continue;
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += q[qa(b, t, h) + c] * k[ka(b, u, g) + c];
          p[u] = scale * d;
          m = std::max(m, p[u]);
        }
        for (double& e : p)
          sum += (e = std::exp(e - m));
        for (int64_t u = 0; u <= t; u++) {
          p[u] /= sum;
          double d = 0;
          for (int64_t c = 0; c < hs; c++)
            d += R[qa(b, t, h) + c] * v[ka(b, u, g) + c];
          dp[u] = d;
          pdp += p[u] * d;
        }
        for (int64_t u = 0; u <= t; u++) {
          const double ds = p[u] * (dp[u] - pdp);
          for (int64_t c = 0; c < hs; c++) {
            (*dq)[qa(b, t, h) + c] += scale * ds * k[ka(b, u, g) + c];
            (*dk)[ka(b, u, g) + c] += scale * ds * q[qa(b, t, h) + c];
            (*dv)[ka(b, u, g) + c] += p[u] * R[qa(b, t, h) + c];
          }
        }
      }
    }
}

// ---------------------------------------------------------------- suites

using StorageTypes = ::testing::Types<float, bf16, fp16>;
template <class T>
class LlamaKernel : public ::testing::Test {};
TYPED_TEST_SUITE(LlamaKernel, StorageTypes, ref::StorageTypeNames);
template <class P>
class LlamaParamBackward : public ::testing::Test {};
using StorageGradTypes =
    ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<bf16, float>,
                     ref::storage_grad<bf16, bf16>, ref::storage_grad<fp16, float>>;
TYPED_TEST_SUITE(LlamaParamBackward, StorageGradTypes, ref::StorageGradNames);

}  // namespace llama_cases
