// cross_entropy (CPU): the fused softmax cross-entropy (see kernels.h):
// each row's loss and, in place of its logits, their gradient (optionally
// of soft-capped logits, Gemma 2's).
#include "runtime/cpu/kernels.h"

#include <algorithm>
#include <cmath>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

template <class T>
void cross_entropy_fused(T* logits, float* losses, const int32_t* targets, int64_t N, int64_t V,
                         int64_t Vp, float dloss_scale, float softcap) {
#pragma omp parallel for if (N * Vp >= kParallelElems)
  for (int64_t n = 0; n < N; n++) {
    T* x = logits + n * Vp;
    if (softcap > 0.0f) {
#pragma omp simd
      for (int64_t v = 0; v < V; v++)
        x[v] = from_float<T>(softcap_of(to_float(x[v]), softcap));
    }
    float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
    for (int64_t v = 0; v < V; v++)
      maxv = std::max(maxv, to_float(x[v]));
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; v++)
      sum += exp_clamped(to_float(x[v]) - maxv);
    const int64_t target = targets[n];
    losses[n] = std::log(sum) + maxv - to_float(x[target]);
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t v = 0; v < V; v++) {
      const float c = to_float(x[v]), p = exp_clamped(c - maxv) * inv;
      const float slope = softcap_slope(c, softcap);
      x[v] = from_float<T>(dloss_scale * (p - (v == target ? 1.0f : 0.0f)) * slope);
    }
    std::fill(x + V, x + Vp, from_float<T>(0.0f));  // padded columns: no part in the loss
  }
}

#define CROSS_ENTROPY_INSTANTIATE_T(T)                                                        \
  template void cross_entropy_fused<T>(T*, float*, const int32_t*, int64_t, int64_t, int64_t, \
                                       float, float);

FSDPGEN_FOR_EACH_DTYPE(CROSS_ENTROPY_INSTANTIATE_T)
