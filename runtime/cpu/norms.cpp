// norms (CPU): the LayerNorm and RMSNorm (see kernels.h), forward and
// backward, a thread per row and, for the weight gradients, per channel block.
#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

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
      const float d = layernorm_dinp_of(rstd[n], dnorm, xhat, dnorm_mean, dnorm_xhat_mean);
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
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, float weight_offset) {
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    const T* x = inp + n * C;
    float ss = 0.0f;
    for (int64_t c = 0; c < C; c++)
      ss += to_float(x[c]) * to_float(x[c]);
    const float s = 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
    if (out != nullptr)
      for (int64_t c = 0; c < C; c++)
        out[n * C + c] = from_float<T>(to_float(x[c]) * s * (weight_offset + to_float(weight[c])));
    rstd[n] = s;
  }
}

template <class T, class G>
void rmsnorm_backward(T* dinp, G* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, bool accumulate,
                      float weight_offset) {
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    float dnorm_xhat_mean = 0.0f;
    for (int64_t c = 0; c < C; c++)
      dnorm_xhat_mean +=
          to_float(dy[c]) * (weight_offset + to_float(weight[c])) * to_float(x[c]) * rstd[n];
    dnorm_xhat_mean /= static_cast<float>(C);
    for (int64_t c = 0; c < C; c++) {
      const float d =
          rmsnorm_dinp_of(rstd[n], to_float(dy[c]) * (weight_offset + to_float(weight[c])),
                          to_float(x[c]) * rstd[n], dnorm_xhat_mean);
      dinp[n * C + c] = from_float<T>(accumulate ? to_float(dinp[n * C + c]) + d : d);
    }
  }
  // dweight += sum over rows of dout * xhat; a thread per channel block.
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
    const int64_t w = std::min(kChannelBlock, C - c0);
    float dw[kChannelBlock] = {};
    for (int64_t n = 0; n < N; n++)
      for (int64_t c = 0; c < w; c++)
        dw[c] += to_float(dout[n * C + c0 + c]) * to_float(inp[n * C + c0 + c]) * rstd[n];
    accumulate_row(dweight + c0, dw, w);
  }
}

#define NORMS_INSTANTIATE_T(T)                                                                  \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t, \
                                     int64_t);                                                  \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, float);

#define NORMS_INSTANTIATE_TG(T, G)                                                               \
  template void layernorm_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, const float*, \
                                         const float*, int64_t, int64_t, bool);                  \
  template void rmsnorm_backward<T, G>(T*, G*, const T*, const T*, const T*, const float*,       \
                                       int64_t, int64_t, bool, float);

FSDPGEN_FOR_EACH_DTYPE(NORMS_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(NORMS_INSTANTIATE_TG)
