// Reference: naive double-precision versions of the runtime's kernels and of
// a gpt2 block, written independently of runtime/, plus the helpers the
// runtime tests share (random data, dtype round trips, finite differences,
// error reports).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"

namespace ref {

using vec = std::vector<double>;

template <class T>
const char* type_name() {
  return sizeof(T) == 4 ? "fp32" : std::is_same_v<T, fp16> ? "fp16" : "bf16";
}

// Typed-test names: fp32, bf16, fp16, and fp32_bf16 for (storage, gradient) pairs.
struct StorageTypeNames {
  template <class T>
  static std::string GetName(int) {
    return type_name<T>();
  }
};
template <class T_, class G_>
struct storage_grad {
  using T = T_;
  using G = G_;
};
struct StorageGradNames {
  template <class P>
  static std::string GetName(int) {
    return std::string(type_name<typename P::T>()) + "_" + type_name<typename P::G>();
  }
};

inline vec random_vec(std::mt19937& rng, int64_t n, double scale = 1.0, double offset = 0.0) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  vec v(n);
  for (double& x : v)
    x = offset + scale * u(rng);
  return v;
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int32_t V) {
  std::uniform_int_distribution<int32_t> u(0, V - 1);
  std::vector<int32_t> t(n);
  for (int32_t& x : t)
    x = u(rng);
  return t;
}

// Storage of doubles as T, and back.
template <class T>
std::vector<T> store(const vec& v) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size(); i++)
    out[i] = from_float<T>(static_cast<float>(v[i]));
  return out;
}
template <class T>
vec load(const T* p, int64_t n) {
  vec out(n);
  for (int64_t i = 0; i < n; i++)
    out[i] = to_float(p[i]);
  return out;
}
template <class T>
vec load(const std::vector<T>& v) {
  return load(v.data(), static_cast<int64_t>(v.size()));
}
// The values a T can hold nearest to v: what a kernel on T storage sees.
template <class T>
vec quantize(const vec& v) {
  return load(store<T>(v));
}

inline double dot(const vec& a, const vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); i++)
    s += a[i] * b[i];
  return s;
}
inline vec add(const vec& a, const vec& b) {
  vec out(a.size());
  for (size_t i = 0; i < a.size(); i++)
    out[i] = a[i] + b[i];
  return out;
}

// Central finite differences of a scalar function at x, for every element.
inline vec fd_grad(const vec& x, const std::function<double(const vec&)>& f, double h = 1e-5) {
  vec g(x.size()), xp = x;
  for (size_t i = 0; i < x.size(); i++) {
    xp[i] = x[i] + h;
    const double up = f(xp);
    xp[i] = x[i] - h;
    const double down = f(xp);
    xp[i] = x[i];
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// Checks |got - want| <= atol + rtol * |want| everywhere and prints the
// largest absolute and relative (to |want| + atol) errors, as llm.c does.
inline void expect_close(const std::string& what, const vec& got, const vec& want, double atol,
                         double rtol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double max_abs = 0.0, max_rel = 0.0;
  int64_t bad = 0, first_bad = -1;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::abs(got[i] - want[i]);
    max_abs = std::max(max_abs, err);
    max_rel = std::max(max_rel, err / (std::abs(want[i]) + atol));
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      if (bad++ == 0) first_bad = static_cast<int64_t>(i);
    }
  }
  std::printf("  %-48s max abs err %.2e  max rel err %.2e  (%zu values)\n", what.c_str(), max_abs,
              max_rel, got.size());
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << got.size()
                    << " values out of tolerance (atol " << atol << ", rtol " << rtol
                    << "); first at " << first_bad << ": got " << got[first_bad] << ", want "
                    << want[first_bad];
}

// |got - want| <= atol + rtol * |want|.
struct tolerance {
  double atol, rtol;
};
inline void expect_close(const std::string& what, const vec& got, const vec& want, tolerance tol) {
  expect_close(what, got, want, tol.atol, tol.rtol);
}

// Root mean square of v (0 for none).
inline double rms(const vec& v) {
  double s = 0.0;
  for (double x : v)
    s += x * x;
  return v.empty() ? 0.0 : std::sqrt(s / static_cast<double>(v.size()));
}

// |got - want| <= tol * (|want| + rms(want)): relative to each value, with
// values near zero judged against the tensor's own scale.
inline void expect_close_scaled(const std::string& what, const vec& got, const vec& want,
                                double tol) {
  expect_close(what, got, want, tol * rms(want), tol);
}

// "kernel<fp32> what", "kernel<bf16,fp32> what": names in printed errors.
template <class T>
std::string tag(const char* kernel, const char* what) {
  return std::string(kernel) + "<" + type_name<T>() + "> " + what;
}
template <class T, class G>
std::string tag(const char* kernel, const char* what) {
  return std::string(kernel) + "<" + type_name<T>() + "," + type_name<G>() + "> " + what;
}

// Tolerances (|got - want| <= atol + rtol * |want|). Inputs are first rounded
// to the storage type, so the reference sees exactly what the kernel sees.
//  - fp32 forward: fp32 arithmetic over sums of at most ~100 terms of size ~1
//    errs by < 1e-6 (measured max 9e-7); 1e-5 leaves a margin.
//  - fp32 backward: the finite differences (h = 1e-5 in double) are exact to
//    ~1e-9; the analytic gradient carries fp32 rounding of its sums (measured
//    max 1.4e-6); 1e-4 allows other BLAS kernels' summation orders.
//  - bf16: every stored value is rounded to 8 significant bits (relative
//    2^-9 ~ 2e-3); attention also rounds its scores (before the softmax, as
//    PyTorch's eager bf16 attention does), probabilities and score gradients
//    to bf16, and += into a bf16 gradient rounds again, in encoder_backward
//    once per occurrence of a token. Measured max abs errors: 1.2e-2 (encoder
//    dwte), 7.8e-3 (attention out), 3.9e-3 elsewhere; 2e-2 absolute and
//    relative (the data are of unit scale).
//  - fp16: the same roundings at 11 significant bits (relative 2^-12, 8x
//    finer than bf16); 4e-3 absolute and relative.
template <class T>
tolerance forward_tol() {
  if constexpr (std::is_same_v<T, fp16>) return tolerance{4e-3, 4e-3};
  return sizeof(T) == 4 ? tolerance{1e-5, 1e-5} : tolerance{2e-2, 2e-2};
}
template <class T>
tolerance backward_tol() {
  if constexpr (std::is_same_v<T, fp16>) return tolerance{4e-3, 4e-3};
  return sizeof(T) == 4 ? tolerance{1e-4, 1e-4} : tolerance{2e-2, 2e-2};
}
template <class T, class G>
tolerance backward_tol() {
  if constexpr (sizeof(T) == 4 && sizeof(G) == 4) return backward_tol<float>();
  return backward_tol<std::conditional_t<sizeof(T) == 2, T, G>>();
}

// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
inline vec encoder(const std::vector<int32_t>& tokens, const vec& wte, const vec& wpe, int64_t B,
                   int64_t T, int64_t C) {
  vec out(B * T * C);
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t c = 0; c < C; c++)
        out[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
  return out;
}

// LayerNorm over rows of (N, C), biased variance, eps 1e-5; mean and rstd per row.
inline vec layernorm(const vec& x, const vec& w, const vec& b, int64_t N, int64_t C,
                     vec* mean = nullptr, vec* rstd = nullptr) {
  vec out(N * C);
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int64_t n = 0; n < N; n++) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; c++)
      m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; c++)
      v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t c = 0; c < C; c++)
      out[n * C + c] = (x[n * C + c] - m) * s * w[c] + b[c];
    if (mean) (*mean)[n] = m;
    if (rstd) (*rstd)[n] = s;
  }
  return out;
}

// x (N, IC) @ w (IC, OC) + bias (OC; empty for none).
inline vec matmul(const vec& x, const vec& w, const vec& bias, int64_t N, int64_t IC, int64_t OC) {
  vec out(N * OC);
  for (int64_t n = 0; n < N; n++)
    for (int64_t o = 0; o < OC; o++) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int64_t i = 0; i < IC; i++)
        s += x[n * IC + i] * w[i * OC + o];
      out[n * OC + o] = s;
    }
  return out;
}

// x (N, C) @ w^T, w (V, C).
inline vec lm_head(const vec& x, const vec& w, int64_t N, int64_t C, int64_t V) {
  vec out(N * V);
  for (int64_t n = 0; n < N; n++)
    for (int64_t v = 0; v < V; v++) {
      double s = 0.0;
      for (int64_t c = 0; c < C; c++)
        s += x[n * C + c] * w[v * C + c];
      out[n * V + v] = s;
    }
  return out;
}

// Causal attention over qkv (B*T, 3C); probs (B, H, T, T) and the
// log-sum-exp of each query's scaled scores, lse (B, H, T), if asked.
inline vec attention(const vec& qkv, int64_t B, int64_t T, int64_t C, int64_t H,
                     vec* probs = nullptr, vec* lse = nullptr) {
  const int64_t hs = C / H;
  vec out(B * T * C, 0.0);
  if (probs) probs->assign(B * H * T * T, 0.0);
  if (lse) lse->assign(B * H * T, 0.0);
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t i) {
    return qkv[(b * T + t) * 3 * C + part * C + h * hs + i];
  };
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t t = 0; t < T; t++) {
        vec s(t + 1);
        for (int64_t u = 0; u <= t; u++) {
          double d = 0.0;
          for (int64_t i = 0; i < hs; i++)
            d += at(b, t, 0, h, i) * at(b, u, 1, h, i);
          s[u] = d / std::sqrt(static_cast<double>(hs));
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double z = 0.0;
        for (double& e : s)
          z += (e = std::exp(e - mx));
        if (lse) (*lse)[(b * H + h) * T + t] = mx + std::log(z);
        for (int64_t u = 0; u <= t; u++) {
          const double p = s[u] / z;
          if (probs) (*probs)[((b * H + h) * T + t) * T + u] = p;
          for (int64_t i = 0; i < hs; i++)
            out[(b * T + t) * C + h * hs + i] += p * at(b, u, 2, h, i);
        }
      }
  return out;
}

// Hugging Face "gelu_new".
inline vec gelu(const vec& x) {
  const double pi = 3.14159265358979323846;
  vec out(x.size());
  for (size_t i = 0; i < x.size(); i++)
    out[i] = 0.5 * x[i] *
             (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  return out;
}

// Gemma 2's soft-capping: X tanh(x / X) of each value.
inline vec softcap(const vec& x, double X) {
  vec out(x.size());
  for (size_t i = 0; i < x.size(); i++)
    out[i] = X * std::tanh(x[i] / X);
  return out;
}

// Per-row -log softmax(logits)[target].
inline vec cross_entropy(const vec& logits, const std::vector<int32_t>& targets, int64_t N,
                         int64_t V) {
  vec losses(N);
  for (int64_t n = 0; n < N; n++) {
    const double* x = logits.data() + n * V;
    const double mx = *std::max_element(x, x + V);
    double z = 0.0;
    for (int64_t v = 0; v < V; v++)
      z += std::exp(x[v] - mx);
    losses[n] = std::log(z) + mx - x[targets[n]];
  }
  return losses;
}

struct dims {
  int64_t B, T, C, H, F, V;
  int64_t N() const { return B * T; }
};

// A gpt2 block's parameters, in the runtime's tensor order.
struct block_params {
  vec ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};
using block_tensor = vec block_params::*;
struct named_tensor {
  const char* name;
  block_tensor member;
};
inline const std::vector<named_tensor>& block_tensors() {
  static const std::vector<named_tensor> t = {
      {"ln_1.weight", &block_params::ln1_w},         {"ln_1.bias", &block_params::ln1_b},
      {"attn.c_attn.weight", &block_params::qkv_w},  {"attn.c_attn.bias", &block_params::qkv_b},
      {"attn.c_proj.weight", &block_params::proj_w}, {"attn.c_proj.bias", &block_params::proj_b},
      {"ln_2.weight", &block_params::ln2_w},         {"ln_2.bias", &block_params::ln2_b},
      {"mlp.c_fc.weight", &block_params::fc_w},      {"mlp.c_fc.bias", &block_params::fc_b},
      {"mlp.c_proj.weight", &block_params::fc2_w},   {"mlp.c_proj.bias", &block_params::fc2_b}};
  return t;
}

inline block_params random_block(std::mt19937& rng, const dims& d) {
  const int64_t C = d.C, F = d.F;
  block_params p;
  p.ln1_w = random_vec(rng, C, 0.2, 1.0);
  p.ln1_b = random_vec(rng, C, 0.1);
  p.qkv_w = random_vec(rng, C * 3 * C, 0.4);
  p.qkv_b = random_vec(rng, 3 * C, 0.1);
  p.proj_w = random_vec(rng, C * C, 0.3);
  p.proj_b = random_vec(rng, C, 0.1);
  p.ln2_w = random_vec(rng, C, 0.2, 1.0);
  p.ln2_b = random_vec(rng, C, 0.1);
  p.fc_w = random_vec(rng, C * F, 0.4);
  p.fc_b = random_vec(rng, F, 0.1);
  p.fc2_w = random_vec(rng, F * C, 0.2);
  p.fc2_b = random_vec(rng, C, 0.1);
  return p;
}

// Hugging Face GPT2Block on x (N, C).
inline vec block(const vec& x, const block_params& p, const dims& d) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  const vec ln1 = layernorm(x, p.ln1_w, p.ln1_b, N, C);
  const vec qkv = matmul(ln1, p.qkv_w, p.qkv_b, N, C, 3 * C);
  const vec att = attention(qkv, d.B, d.T, C, d.H);
  const vec res2 = add(x, matmul(att, p.proj_w, p.proj_b, N, C, C));
  const vec ln2 = layernorm(res2, p.ln2_w, p.ln2_b, N, C);
  const vec h = gelu(matmul(ln2, p.fc_w, p.fc_b, N, C, F));
  return add(res2, matmul(h, p.fc2_w, p.fc2_b, N, F, C));
}

// Final norm, LM head (w (V, C)) and summed cross-entropy of x (N, C).
inline double head_loss(const vec& x, const vec& lnf_w, const vec& lnf_b, const vec& head_w,
                        const std::vector<int32_t>& targets, const dims& d) {
  const vec y = layernorm(x, lnf_w, lnf_b, d.N(), d.C);
  const vec losses = cross_entropy(lm_head(y, head_w, d.N(), d.C, d.V), targets, d.N(), d.V);
  double s = 0.0;
  for (double l : losses)
    s += l;
  return s;
}

}  // namespace ref
