// kernels: the gpt2 family's CPU kernels (see kernels.h), fp32 arithmetic on
// float or bf16 storage, OpenMP over rows, channels or (sequence, head) pairs.
#include "runtime/kernels.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace {

// Below this many elements an elementwise loop runs on one thread.
constexpr int64_t kParallelElems = 1 << 14;
// Channels one thread reduces over all rows (parameter-gradient column sums).
constexpr int64_t kChannelBlock = 64;

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

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

}  // namespace

template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C) {
#pragma omp parallel for if (B * T_ * C >= kParallelElems)
  for (int64_t n = 0; n < B * T_; n++) {
    const T* e = wte + int64_t{tokens[n]} * C;
    const T* p = wpe + (n % T_) * C;
    for (int64_t c = 0; c < C; c++)
      out[n * C + c] = from_float<T>(to_float(e[c]) + to_float(p[c]));
  }
}

template <class T, class G>
void encoder_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                      int64_t C) {
  const int64_t N = B * T_;
  // dwpe[t] += sum over b of dout[b, t]: one thread per position.
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t t = 0; t < T_; t++) {
    for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
      const int64_t w = std::min(kChannelBlock, C - c0);
      float acc[kChannelBlock] = {};
      for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < w; c++)
          acc[c] += to_float(dout[(b * T_ + t) * C + c0 + c]);
      accumulate_row(dwpe + t * C + c0, acc, w);
    }
  }
  // dwte: the rows sorted by token (stable, so sums run in position order),
  // each token's rows summed in fp32 by the thread that owns that token.
  std::vector<int64_t> order(N);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return tokens[x] < tokens[y]; });
#pragma omp parallel for schedule(dynamic, 16) if (N * C >= kParallelElems)
  for (int64_t i = 0; i < N; i++) {
    const int32_t tok = tokens[order[i]];
    if (i > 0 && tokens[order[i - 1]] == tok) continue;  // not the first row of its token
    for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
      const int64_t w = std::min(kChannelBlock, C - c0);
      float acc[kChannelBlock] = {};
      for (int64_t j = i; j < N && tokens[order[j]] == tok; j++)
        for (int64_t c = 0; c < w; c++)
          acc[c] += to_float(dout[order[j] * C + c0 + c]);
      accumulate_row(dwte + int64_t{tok} * C + c0, acc, w);
    }
  }
}

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int64_t N, int64_t C) {
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    const T* x = inp + n * C;
    float m = 0.0f;
    for (int64_t c = 0; c < C; c++)
      m += to_float(x[c]);
    m /= static_cast<float>(C);
    float v = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      const float d = to_float(x[c]) - m;
      v += d * d;
    }
    v /= static_cast<float>(C);
    const float s = 1.0f / std::sqrt(v + kLayerNormEps);
    for (int64_t c = 0; c < C; c++)
      out[n * C + c] =
          from_float<T>((to_float(x[c]) - m) * s * to_float(weight[c]) + to_float(bias[c]));
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class T, class G>
void layernorm_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C,
                        bool accumulate) {
  // dinp = rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dout * weight.
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
    for (int64_t c = 0; c < C; c++) {
      const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
      const float dnorm = to_float(dy[c]) * to_float(weight[c]);
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= static_cast<float>(C);
    dnorm_xhat_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; c++) {
      const float xhat = (to_float(x[c]) - mean[n]) * rstd[n];
      const float dnorm = to_float(dy[c]) * to_float(weight[c]);
      const float d = rstd[n] * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
      dinp[n * C + c] = from_float<T>(accumulate ? to_float(dinp[n * C + c]) + d : d);
    }
  }
  // dweight += sum over rows of dout * xhat, dbias += sum of dout; a thread per channel block.
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
    const int64_t w = std::min(kChannelBlock, C - c0);
    float dw[kChannelBlock] = {}, db[kChannelBlock] = {};
    for (int64_t n = 0; n < N; n++) {
      for (int64_t c = 0; c < w; c++) {
        const float dy = to_float(dout[n * C + c0 + c]);
        dw[c] += dy * (to_float(inp[n * C + c0 + c]) - mean[n]) * rstd[n];
        db[c] += dy;
      }
    }
    accumulate_row(dweight + c0, dw, w);
    accumulate_row(dbias + c0, db, w);
  }
}

template <class T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC,
                    int64_t OC, const gemm_workspace& ws) {
  // The bias is broadcast into out first and the GEMM adds to it (beta = 1),
  // so a bf16 out is rounded once.
  if (bias) {
#pragma omp parallel for if (N * OC >= kParallelElems)
    for (int64_t n = 0; n < N; n++)
      std::copy(bias, bias + OC, out + n * OC);
  }
  gemm(false, false, N, OC, IC, 1.0f, inp, IC, weight, OC, bias ? 1.0f : 0.0f, out, OC, ws);
}

template <class T, class G>
void matmul_backward(T* dinp, G* dweight, G* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t IC, int64_t OC, const gemm_workspace& ws) {
  if (dinp) gemm(false, true, N, IC, OC, 1.0f, dout, OC, weight, OC, 0.0f, dinp, IC, ws);
  gemm(true, false, IC, OC, N, 1.0f, inp, IC, dout, OC, 1.0f, dweight, OC, ws);
  if (dbias) column_sums_accumulate(dbias, dout, N, OC);
}

template <class T>
void lm_head_forward(T* logits, const T* x, const T* w, int64_t N, int64_t C, int64_t V,
                     const gemm_workspace& ws) {
  gemm(false, true, N, V, C, 1.0f, x, C, w, C, 0.0f, logits, V, ws);
}

template <class T, class G>
void lm_head_backward(T* dx, G* dw, const T* dlogits, const T* x, const T* w, int64_t N, int64_t C,
                      int64_t V, const gemm_workspace& ws) {
  gemm(false, false, N, C, V, 1.0f, dlogits, V, w, C, 0.0f, dx, C, ws);
  gemm(true, false, V, C, N, 1.0f, dlogits, V, x, C, 1.0f, dw, C, ws);
}

template <class T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t C,
                       int64_t H) {
  const int64_t hs = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel if (B * H * T_ * T_ * hs >= kParallelElems)
  {
    std::vector<float> p(T_), acc(hs);  // one probability row, one output row
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < H; h++) {
        for (int64_t t = 0; t < T_; t++) {
          const T* q = qkv + (b * T_ + t) * 3 * C + h * hs;
          float maxv = -INFINITY;
          for (int64_t t2 = 0; t2 <= t; t2++) {
            const T* k = qkv + (b * T_ + t2) * 3 * C + C + h * hs;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < hs; i++)
              s += to_float(q[i]) * to_float(k[i]);
            p[t2] = s * scale;
            maxv = std::max(maxv, p[t2]);
          }
          float sum = 0.0f;
          for (int64_t t2 = 0; t2 <= t; t2++) {
            p[t2] = std::exp(p[t2] - maxv);
            sum += p[t2];
          }
          T* prow = probs + ((b * H + h) * T_ + t) * T_;
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t2 = 0; t2 <= t; t2++) {
            p[t2] /= sum;
            prow[t2] = from_float<T>(p[t2]);
            const T* v = qkv + (b * T_ + t2) * 3 * C + 2 * C + h * hs;
            for (int64_t i = 0; i < hs; i++)
              acc[i] += p[t2] * to_float(v[i]);
          }
          for (int64_t t2 = t + 1; t2 < T_; t2++)
            prow[t2] = from_float<T>(0.0f);
          T* o = out + (b * T_ + t) * C + h * hs;
          for (int64_t i = 0; i < hs; i++)
            o[i] = from_float<T>(acc[i]);
        }
      }
    }
  }
}

template <class T>
void attention_backward(T* dqkv, T* dprobs, const T* dout, const T* qkv, const T* probs, int64_t B,
                        int64_t T_, int64_t C, int64_t H) {
  const int64_t hs = C / H;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel if (B * H * T_ * T_ * hs >= kParallelElems)
  {
    std::vector<float> dp(T_), acc(hs);  // one dprobs row, one gradient row
#pragma omp for collapse(2)
    for (int64_t b = 0; b < B; b++) {
      for (int64_t h = 0; h < H; h++) {
        const T* P = probs + (b * H + h) * T_ * T_;  // (T, T)
        T* dS = dprobs + (b * H + h) * T_ * T_;      // (T, T): d(scaled scores)
        auto q_at = [&](int64_t t) { return qkv + (b * T_ + t) * 3 * C + h * hs; };
        auto k_at = [&](int64_t t) { return q_at(t) + C; };
        auto v_at = [&](int64_t t) { return q_at(t) + 2 * C; };
        auto do_at = [&](int64_t t) { return dout + (b * T_ + t) * C + h * hs; };
        auto d_at = [&](int64_t t, int64_t part) {
          return dqkv + (b * T_ + t) * 3 * C + part * C + h * hs;
        };
        // dprobs[t, t2] = dout[t] . v[t2]; softmax backward: dS = P * (dP - sum(P * dP)).
        for (int64_t t = 0; t < T_; t++) {
          float dot = 0.0f;
          for (int64_t t2 = 0; t2 <= t; t2++) {
            const T* dy = do_at(t);
            const T* v = v_at(t2);
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int64_t i = 0; i < hs; i++)
              s += to_float(dy[i]) * to_float(v[i]);
            dp[t2] = s;
            dot += to_float(P[t * T_ + t2]) * s;
          }
          for (int64_t t2 = 0; t2 <= t; t2++)
            dS[t * T_ + t2] = from_float<T>(to_float(P[t * T_ + t2]) * (dp[t2] - dot));
          for (int64_t t2 = t + 1; t2 < T_; t2++)
            dS[t * T_ + t2] = from_float<T>(0.0f);
        }
        // dq[t] = scale * sum over t2 <= t of dS[t, t2] k[t2].
        for (int64_t t = 0; t < T_; t++) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t2 = 0; t2 <= t; t2++) {
            const float g = to_float(dS[t * T_ + t2]);
            for (int64_t i = 0; i < hs; i++)
              acc[i] += g * to_float(k_at(t2)[i]);
          }
          for (int64_t i = 0; i < hs; i++)
            d_at(t, 0)[i] = from_float<T>(scale * acc[i]);
        }
        // dk[t2] = scale * sum over t >= t2 of dS[t, t2] q[t].
        for (int64_t t2 = 0; t2 < T_; t2++) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t = t2; t < T_; t++) {
            const float g = to_float(dS[t * T_ + t2]);
            for (int64_t i = 0; i < hs; i++)
              acc[i] += g * to_float(q_at(t)[i]);
          }
          for (int64_t i = 0; i < hs; i++)
            d_at(t2, 1)[i] = from_float<T>(scale * acc[i]);
        }
        // dv[t2] = sum over t >= t2 of P[t, t2] dout[t].
        for (int64_t t2 = 0; t2 < T_; t2++) {
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t t = t2; t < T_; t++) {
            const float p = to_float(P[t * T_ + t2]);
            for (int64_t i = 0; i < hs; i++)
              acc[i] += p * to_float(do_at(t)[i]);
          }
          for (int64_t i = 0; i < hs; i++)
            d_at(t2, 2)[i] = from_float<T>(acc[i]);
        }
      }
    }
  }
}

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float x = to_float(inp[i]);
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = from_float<T>(0.5f * x * (1.0f + std::tanh(u)));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float x = to_float(inp[i]);
    const float u = kGeluScale * (x + kGeluCube * x * x * x);
    const float th = std::tanh(u);
    const float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    dinp[i] = from_float<T>(grad * to_float(dout[i]));
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         float dloss_scale) {
#pragma omp parallel for if (N * V >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    T* x = logits + n * V;
    float maxv = -INFINITY;
    for (int64_t v = 0; v < V; v++)
      maxv = std::max(maxv, to_float(x[v]));
    float sum = 0.0f;
    for (int64_t v = 0; v < V; v++)
      sum += std::exp(to_float(x[v]) - maxv);
    const int64_t target = targets[n];
    losses[n] = std::log(sum) + maxv - to_float(x[target]);
    for (int64_t v = 0; v < V; v++) {
      const float p = std::exp(to_float(x[v]) - maxv) / sum;
      x[v] = from_float<T>(dloss_scale * (p - (v == target ? 1.0f : 0.0f)));
    }
  }
}

#define KERNELS_INSTANTIATE_T(T)                                                                \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,    \
                                   int64_t);                                                    \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, \
                                     int64_t);                                                  \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,  \
                                  const gemm_workspace&);                                       \
  template void lm_head_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t,           \
                                   const gemm_workspace&);                                      \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t);     \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t,   \
                                      int64_t, int64_t);                                        \
  template void gelu_forward<T>(T*, const T*, int64_t);                                         \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                              \
  template void residual_forward<T>(T*, const T*, const T*, int64_t);                           \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, float);

#define KERNELS_INSTANTIATE_TG(T, G)                                                              \
  template void encoder_backward<T, G>(G*, G*, const T*, const int32_t*, int64_t, int64_t,        \
                                       int64_t);                                                  \
  template void layernorm_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, const float*,  \
                                         const float*, int64_t, int64_t, bool);                   \
  template void matmul_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, int64_t, int64_t, \
                                      int64_t, const gemm_workspace&);                            \
  template void lm_head_backward<T, G>(T*, G*, const T*, const T*, const T*, int64_t, int64_t,    \
                                       int64_t, const gemm_workspace&);

KERNELS_INSTANTIATE_T(float)
KERNELS_INSTANTIATE_T(bf16)
KERNELS_INSTANTIATE_TG(float, float)
KERNELS_INSTANTIATE_TG(float, bf16)
KERNELS_INSTANTIATE_TG(bf16, float)
KERNELS_INSTANTIATE_TG(bf16, bf16)
