// attention (CPU): the causal attention (see kernels.h): the materialized
// one (scores on gemm(), row blocks below the diagonal) and the flash one (online
// softmax, fp32 rows), packed gpt2 qkv or llama's grouped-query heads, the
// latter optionally within a sliding window (Mistral), with another scale
// and soft-capped scores (Gemma 2).
#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

namespace {

// Rows of a (T, T) attention matrix per GEMM: each row block's products stop
// at the block's last column, skipping most of the work above the diagonal.
constexpr int64_t kAttentionRowBlock = 64;

}  // namespace

// One (T, T) row of attention scores in place: the first t + 1 become their
// softmax (fp32), the rest zeros.
template <class T>
void softmax_causal_row(T* row, int64_t t, int64_t T_) {
  float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
  for (int64_t u = 0; u <= t; u++)
    maxv = std::max(maxv, to_float(row[u]));
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t u = 0; u <= t; u++)
    sum += exp_clamped(to_float(row[u]) - maxv);
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t u = 0; u <= t; u++)
    row[u] = from_float<T>(exp_clamped(to_float(row[u]) - maxv) * inv);
  std::fill(row + t + 1, row + T_, from_float<T>(0.0f));
}

// One (T, T) row of softmax backward in place: dS[u] = scale * P[u] (dP[u] -
// sum over u' of P[u'] dP[u']) for u <= t, zeros after.
template <class T>
void softmax_causal_row_backward(T* ds, const T* p, int64_t t, int64_t T_, float scale) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int64_t u = 0; u <= t; u++)
    dot += to_float(p[u]) * to_float(ds[u]);
#pragma omp simd
  for (int64_t u = 0; u <= t; u++)
    ds[u] = from_float<T>(scale * to_float(p[u]) * (to_float(ds[u]) - dot));
  std::fill(ds + t + 1, ds + T_, from_float<T>(0.0f));
}

template <class T>
void attention_forward(T* out, T* probs, const T* qkv, int64_t B, int64_t T_, int64_t C, int64_t H,
                       const gemm_workspace& ws) {
  const int64_t hs = C / H, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Head bh = (b, h): q, k, v (T, hs) with leading dim 3C; P (T, T).
  auto q_at = [&](int64_t bh) { return qkv + (bh / H) * T_ * C3 + (bh % H) * hs; };
  auto p_at = [&](int64_t bh) { return probs + bh * T_ * T_; };
  // GEMMs and OpenMP loops run in separate phases, never one inside the other.
  // Scores, rows [t0, t0 + m): P[t, :t0+m] = scale * q[t] k[:t0+m]^T.
  for (int64_t bh = 0; bh < B * H; bh++) {
    const T* q = q_at(bh);
    const T* k = q + C;
    for (int64_t t0 = 0; t0 < T_; t0 += kAttentionRowBlock) {
      const int64_t m = std::min(kAttentionRowBlock, T_ - t0);
      gemm(false, true, m, t0 + m, hs, scale, q + t0 * C3, C3, k, C3, 0.0f, p_at(bh) + t0 * T_, T_,
           ws);
    }
  }
#pragma omp parallel for if (B * H * T_ * T_ >= kParallelElems)
  for (int64_t r = 0; r < B * H * T_; r++)
    softmax_causal_row(probs + r * T_, r % T_, T_);
  // out (T, hs) with leading dim C, rows [t0, t0 + m): out[t] = P[t, :t0+m] v[:t0+m].
  for (int64_t bh = 0; bh < B * H; bh++) {
    const T* v = q_at(bh) + 2 * C;
    T* o = out + (bh / H) * T_ * C + (bh % H) * hs;
    for (int64_t t0 = 0; t0 < T_; t0 += kAttentionRowBlock) {
      const int64_t m = std::min(kAttentionRowBlock, T_ - t0);
      gemm(false, false, m, hs, t0 + m, 1.0f, p_at(bh) + t0 * T_, T_, v, C3, 0.0f, o + t0 * C, C,
           ws);
    }
  }
}

template <class T>
void attention_backward(T* dqkv, T* dprobs, const T* dout, const T* qkv, const T* probs, int64_t B,
                        int64_t T_, int64_t C, int64_t H, const gemm_workspace& ws) {
  const int64_t hs = C / H, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  // Head bh = (b, h): q, k, v and dq, dk, dv (T, hs) with leading dim 3C; dout (T, hs) with
  // leading dim C; P and dS (T, T).
  auto q_at = [&](int64_t bh) { return qkv + (bh / H) * T_ * C3 + (bh % H) * hs; };
  auto dq_at = [&](int64_t bh) { return dqkv + (bh / H) * T_ * C3 + (bh % H) * hs; };
  auto dout_at = [&](int64_t bh) { return dout + (bh / H) * T_ * C + (bh % H) * hs; };
  // GEMMs and OpenMP loops run in separate phases, never one inside the other.
  // Rows [t0, t0 + m): dP[t, :t0+m] = dout[t] v[:t0+m]^T, into dprobs.
  for (int64_t bh = 0; bh < B * H; bh++) {
    const T* v = q_at(bh) + 2 * C;
    for (int64_t t0 = 0; t0 < T_; t0 += kAttentionRowBlock) {
      const int64_t m = std::min(kAttentionRowBlock, T_ - t0);
      gemm(false, true, m, t0 + m, hs, 1.0f, dout_at(bh) + t0 * C, C, v, C3, 0.0f,
           dprobs + (bh * T_ + t0) * T_, T_, ws);
    }
  }
  // dS = d(q k^T) (the scale folded in) in place of dP; its zeros above the diagonal are read
  // by the GEMMs below.
#pragma omp parallel for if (B * H * T_ * T_ >= kParallelElems)
  for (int64_t r = 0; r < B * H * T_; r++)
    softmax_causal_row_backward(dprobs + r * T_, probs + r * T_, r % T_, T_, scale);
  // Rows [t0, t0 + m) of dq, and of dk and dv, which only rows t >= t0 of dS and P reach:
  // dq = dS[t0.., :t0+m] k[:t0+m], dk = dS[t0:, t0..]^T q[t0:], dv = P[t0:, t0..]^T dout[t0:].
  for (int64_t bh = 0; bh < B * H; bh++) {
    const T* q = q_at(bh);
    const T* k = q + C;
    const T* dy = dout_at(bh);
    const T* P = probs + bh * T_ * T_;
    const T* dS = dprobs + bh * T_ * T_;
    T* dq = dq_at(bh);
    T* dk = dq + C;
    T* dv = dq + 2 * C;
    for (int64_t t0 = 0; t0 < T_; t0 += kAttentionRowBlock) {
      const int64_t m = std::min(kAttentionRowBlock, T_ - t0);
      gemm(false, false, m, hs, t0 + m, 1.0f, dS + t0 * T_, T_, k, C3, 0.0f, dq + t0 * C3, C3, ws);
      gemm(true, false, m, hs, T_ - t0, 1.0f, dS + t0 * T_ + t0, T_, q + t0 * C3, C3, 0.0f,
           dk + t0 * C3, C3, ws);
      gemm(true, false, m, hs, T_ - t0, 1.0f, P + t0 * T_ + t0, T_, dy + t0 * C, C, 0.0f,
           dv + t0 * C3, C3, ws);
    }
  }
}

namespace {

// fp32 dot product of two rows of n values of T.
template <class T>
float dot_row(const T* a, const T* b, int64_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; i++)
    s += to_float(a[i]) * to_float(b[i]);
  return s;
}

// acc[i] += w * x[i] for i in [0, n).
template <class T>
void add_scaled_row(float* acc, float w, const T* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++)
    acc[i] += w * to_float(x[i]);
}

// Where the rows of query head bh = b * H + h are, in elements: position t's
// q at q + q_at(bh, t), its k and v (kv head h / group) at k + kv_at(bh, t)
// and v + kv_at(bh, t), its out and dout at out_at(bh, t) (rows H * hs
// wide), its lse and delta at bh * T + t. Packed qkv (gpt2) is q, k and v
// rows of stride 3C; llama's are arrays of their own. Query t attends keys
// [first(t), t]: all before it, or with a window W the last W (t - u < W, as
// transformers' sliding_window_overlay). Scores are scale q_t . k_u, and
// with a softcap X > 0 X tanh(that / X) (Gemma 2), before the window's mask.
struct flash_rows {
  int64_t T_, H, group, hs, q_stride, kv_stride;
  int64_t window = 0;    // 0: none
  float scale = 0.0f;    // of q . k
  float softcap = 0.0f;  // 0: none
  float score(float dot) const { return softcap_of(scale * dot, softcap); }
  // d(score) / d(scale q . k) at a score c: 1 - (c / X)^2 with a softcap, else 1.
  float score_slope(float c) const { return softcap_slope(c, softcap); }
  int64_t first(int64_t t) const { return attention_first_key(t, window); }
  // The last query that attends key u.
  int64_t last(int64_t u) const { return attention_last_query(u, window, T_); }
  int64_t q_at(int64_t bh, int64_t t) const {
    return ((bh / H) * T_ + t) * q_stride + (bh % H) * hs;
  }
  int64_t kv_at(int64_t bh, int64_t t) const {
    return ((bh / H) * T_ + t) * kv_stride + (bh % H) / group * hs;
  }
  int64_t out_at(int64_t bh, int64_t t) const {
    return ((bh / H) * T_ + t) * H * hs + (bh % H) * hs;
  }
};

flash_rows flash_rows_of(int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, int64_t q_stride,
                         int64_t kv_stride, const attention_options& o = {}) {
  if (o.window < 0)
    throw std::invalid_argument("attention_flash: window " + std::to_string(o.window) +
                                " is negative (0: none)");
  if (!(o.scale >= 0.0f && o.softcap >= 0.0f && std::isfinite(o.scale) && std::isfinite(o.softcap)))
    throw std::invalid_argument("attention_flash: scale " + std::to_string(o.scale) +
                                " or softcap " + std::to_string(o.softcap) +
                                " is negative or not finite (0: the default, none)");
  if (H <= 0 || KV_heads <= 0 || H % KV_heads != 0)
    throw std::invalid_argument("attention_flash: H=" + std::to_string(H) +
                                " query heads are not a multiple of " + std::to_string(KV_heads) +
                                " key/value heads");
  if (hs > kAttentionFlashMaxHeadSize)
    throw std::invalid_argument("attention_flash: head size " + std::to_string(hs) + " exceeds " +
                                std::to_string(kAttentionFlashMaxHeadSize) +
                                ", the most the CPU kernels support");
  const float scale = o.scale > 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(hs));
  return flash_rows{T_, H, H / KV_heads, hs, q_stride, kv_stride, o.window, scale, o.softcap};
}

flash_rows packed_flash_rows(int64_t T_, int64_t C, int64_t H) {
  if (H <= 0 || C % H != 0)
    throw std::invalid_argument("attention_flash: C=" + std::to_string(C) +
                                " is not a multiple of H=" + std::to_string(H));
  return flash_rows_of(T_, H, H, C / H, 3 * C, 3 * C);
}

// Query row r = (bh, t), scores s_u = L.score(q_t . k_u) for u in [first(t), t]. Pass 1:
// lse = log sum exp s_u (online: the running max m and sum of exp(s_u - m));
// pass 2: out_t = sum of exp(s_u - lse) v_u, in fp32. Rows cost t each:
// dynamic scheduling balances them; each row is one thread's.
template <class T>
void flash_forward(T* out, float* lse, const T* q_all, const T* k_all, const T* v_all, int64_t B,
                   const flash_rows& L) {
  const int64_t T_ = L.T_, hs = L.hs;
#pragma omp parallel for schedule(dynamic, 16) if (B * L.H * T_ * T_ * hs >= kParallelElems)
  for (int64_t r = 0; r < B * L.H * T_; r++) {
    const int64_t bh = r / T_, t = r % T_;
    const T* q = q_all + L.q_at(bh, t);
    const T* k0 = k_all + L.kv_at(bh, 0);  // position u's k at k0 + u * kv_stride
    const T* v0 = v_all + L.kv_at(bh, 0);
    const int64_t u0 = L.first(t);
    float m = L.score(dot_row(q, k0 + u0 * L.kv_stride, hs)), l = 1.0f;
    for (int64_t u = u0 + 1; u <= t; u++) {
      const float s = L.score(dot_row(q, k0 + u * L.kv_stride, hs));
      if (s > m) {
        l = l * exp_clamped(m - s) + 1.0f;
        m = s;
      } else {
        l += exp_clamped(s - m);
      }
    }
    const float row_lse = m + std::log(l);
    float acc[kAttentionFlashMaxHeadSize];
    std::fill(acc, acc + hs, 0.0f);
    for (int64_t u = u0; u <= t; u++)
      add_scaled_row(acc, exp_clamped(L.score(dot_row(q, k0 + u * L.kv_stride, hs)) - row_lse),
                     v0 + u * L.kv_stride, hs);
    T* o = out + L.out_at(bh, t);
    for (int64_t c = 0; c < hs; c++)
      o[c] = from_float<T>(acc[c]);
    lse[r] = row_lse;
  }
}

// For u in [first(t), t]: P[t, u] = exp(c - lse_t) for the score c = L.score(q_t .
// k_u), dP[t, u] = dout_t . v_u and the gradient of the scores before the
// softcap dS[t, u] = P[t, u] (dP[t, u] - delta_t) L.score_slope(c), each
// recomputed where it is used. dq by query rows; dk and dv by key rows of
// each kv head, summed over the query heads of its group in head order.
template <class T>
void flash_backward(T* dq_all, T* dk_all, T* dv_all, float* delta, const T* dout, const T* q_all,
                    const T* k_all, const T* v_all, const T* out, const float* lse, int64_t B,
                    const flash_rows& L) {
  const int64_t T_ = L.T_, hs = L.hs, rows = B * L.H * T_;
  const float scale = L.scale;
  const bool parallel = rows * T_ * hs >= kParallelElems;
  // delta_t = dout_t . out_t (= sum over u of P[t, u] dP[t, u], as out_t = sum of P[t, u] v_u).
#pragma omp parallel for if (rows * hs >= kParallelElems)
  for (int64_t r = 0; r < rows; r++)
    delta[r] = dot_row(dout + L.out_at(r / T_, r % T_), out + L.out_at(r / T_, r % T_), hs);
  auto pair = [&](int64_t bh, int64_t t, int64_t u, float* p, float* ds) {
    const T* q = q_all + L.q_at(bh, t);
    const float c = L.score(dot_row(q, k_all + L.kv_at(bh, u), hs));
    *p = exp_clamped(c - lse[bh * T_ + t]);
    *ds = *p * (dot_row(dout + L.out_at(bh, t), v_all + L.kv_at(bh, u), hs) - delta[bh * T_ + t]) *
          L.score_slope(c);
  };
  // By query rows: dq_t = scale * sum over u in [first(t), t] of dS[t, u] k_u.
#pragma omp parallel for schedule(dynamic, 16) if (parallel)
  for (int64_t r = 0; r < rows; r++) {
    const int64_t bh = r / T_, t = r % T_;
    float acc[kAttentionFlashMaxHeadSize];
    std::fill(acc, acc + hs, 0.0f);
    for (int64_t u = L.first(t); u <= t; u++) {
      float p, ds;
      pair(bh, t, u, &p, &ds);
      add_scaled_row(acc, ds, k_all + L.kv_at(bh, u), hs);
    }
    T* dq = dq_all + L.q_at(bh, t);
    for (int64_t c = 0; c < hs; c++)
      dq[c] = from_float<T>(scale * acc[c]);
  }
  // By key rows of kv head (b, g): dk_u = scale * sum over the group's heads h
  // and t in [u, last(u)] of dS_h[t, u] q_t, dv_u = sum of P_h[t, u] dout_t.
  const int64_t kv_rows = rows / L.group;
#pragma omp parallel for schedule(dynamic, 16) if (parallel)
  for (int64_t r = 0; r < kv_rows; r++) {
    const int64_t bg = r / T_, u = r % T_;
    const int64_t kv_heads = L.H / L.group, b = bg / kv_heads, g = bg % kv_heads;
    float dk_acc[kAttentionFlashMaxHeadSize], dv_acc[kAttentionFlashMaxHeadSize];
    std::fill(dk_acc, dk_acc + hs, 0.0f);
    std::fill(dv_acc, dv_acc + hs, 0.0f);
    for (int64_t h = g * L.group; h < (g + 1) * L.group; h++) {
      const int64_t bh = b * L.H + h;
      for (int64_t t = u; t <= L.last(u); t++) {
        float p, ds;
        pair(bh, t, u, &p, &ds);
        add_scaled_row(dk_acc, ds, q_all + L.q_at(bh, t), hs);
        add_scaled_row(dv_acc, p, dout + L.out_at(bh, t), hs);
      }
    }
    const int64_t at = L.kv_at(b * L.H + g * L.group, u);
    for (int64_t c = 0; c < hs; c++) {
      dk_all[at + c] = from_float<T>(scale * dk_acc[c]);
      dv_all[at + c] = from_float<T>(dv_acc[c]);
    }
  }
}

}  // namespace

template <class T>
void attention_forward_flash(T* out, float* lse, const T* qkv, int64_t B, int64_t T_, int64_t C,
                             int64_t H) {
  flash_forward(out, lse, qkv, qkv + C, qkv + 2 * C, B, packed_flash_rows(T_, C, H));
}

template <class T>
void attention_backward_flash(T* dqkv, float* delta, const T* dout, const T* qkv, const T* out,
                              const float* lse, int64_t B, int64_t T_, int64_t C, int64_t H) {
  flash_backward(dqkv, dqkv + C, dqkv + 2 * C, delta, dout, qkv, qkv + C, qkv + 2 * C, out, lse, B,
                 packed_flash_rows(T_, C, H));
}

template <class T>
void attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                           int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                           const attention_options& o) {
  flash_forward(out, lse, q, k, v, B, flash_rows_of(T_, H, KV_heads, hs, H * hs, KV_heads * hs, o));
}

template <class T>
void attention_gqa_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                           int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, int64_t window) {
  attention_gqa_forward(out, lse, q, k, v, B, T_, H, KV_heads, hs, attention_options{window});
}

template <class T>
void attention_gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q,
                            const T* k, const T* v, const T* out, const float* lse, int64_t B,
                            int64_t T_, int64_t H, int64_t KV_heads, int64_t hs,
                            const attention_options& o) {
  flash_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, B,
                 flash_rows_of(T_, H, KV_heads, hs, H * hs, KV_heads * hs, o));
}

template <class T>
void attention_gqa_backward(T* dq, T* dk, T* dv, float* delta, const T* dout, const T* q,
                            const T* k, const T* v, const T* out, const float* lse, int64_t B,
                            int64_t T_, int64_t H, int64_t KV_heads, int64_t hs, int64_t window) {
  attention_gqa_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, B, T_, H, KV_heads, hs,
                         attention_options{window});
}

#define ATTENTION_INSTANTIATE_T(T)                                                             \
  template void attention_forward<T>(T*, T*, const T*, int64_t, int64_t, int64_t, int64_t,     \
                                     const gemm_workspace&);                                   \
  template void attention_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t,  \
                                      int64_t, int64_t, const gemm_workspace&);                \
  template void attention_forward_flash<T>(T*, float*, const T*, int64_t, int64_t, int64_t,    \
                                           int64_t);                                           \
  template void attention_backward_flash<T>(T*, float*, const T*, const T*, const T*,          \
                                            const float*, int64_t, int64_t, int64_t, int64_t); \
  template void attention_gqa_forward<T>(T*, float*, const T*, const T*, const T*, int64_t,    \
                                         int64_t, int64_t, int64_t, int64_t, int64_t);         \
  template void attention_gqa_backward<T>(T*, T*, T*, float*, const T*, const T*, const T*,    \
                                          const T*, const T*, const float*, int64_t, int64_t,  \
                                          int64_t, int64_t, int64_t, int64_t);                 \
  template void attention_gqa_forward<T>(T*, float*, const T*, const T*, const T*, int64_t,    \
                                         int64_t, int64_t, int64_t, int64_t,                   \
                                         const attention_options&);                            \
  template void attention_gqa_backward<T>(T*, T*, T*, float*, const T*, const T*, const T*,    \
                                          const T*, const T*, const float*, int64_t, int64_t,  \
                                          int64_t, int64_t, int64_t, const attention_options&);

FSDPGEN_FOR_EACH_DTYPE(ATTENTION_INSTANTIATE_T)
