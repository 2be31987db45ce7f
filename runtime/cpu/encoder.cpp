// encoder (CPU): the token and position embeddings (see kernels.h), forward
// and the backward that scatters into their gradients.
#include "runtime/cpu/kernels.h"

#include <algorithm>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

template <class T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C) {
#pragma omp parallel for if (B * T_ * C >= kParallelElems)
  for (int64_t n = 0; n < B * T_; n++) {
    const T* e = wte + int64_t{tokens[n]} * C;
    if (wpe == nullptr) {
      std::copy(e, e + C, out + n * C);
      continue;
    }
    const T* p = wpe + (n % T_) * C;
    for (int64_t c = 0; c < C; c++)
      out[n * C + c] = from_float<T>(to_float(e[c]) + to_float(p[c]));
  }
}

template <class T, class G>
void encoder_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                      int64_t C) {
  const int64_t N = B * T_;
  // A thread owns a block of channels of every row, so repeated tokens never
  // race and every sum runs in position order whatever the thread count.
#pragma omp parallel for if (N * C >= kParallelElems)
  for (int64_t c0 = 0; c0 < C; c0 += kChannelBlock) {
    const int64_t w = std::min(kChannelBlock, C - c0);
    // dwpe[t] += sum over b of dout[b, t], summed in fp32 and rounded once.
    for (int64_t t = 0; dwpe && t < T_; t++) {
      float acc[kChannelBlock] = {};
      for (int64_t b = 0; b < B; b++)
        for (int64_t c = 0; c < w; c++)
          acc[c] += to_float(dout[(b * T_ + t) * C + c0 + c]);
      accumulate_row(dwpe + t * C + c0, acc, w);
    }
    // dwte[tokens[n]] += dout[n], n in order, straight into dwte: a bf16
    // gradient is rounded once per occurrence of its token (no scratch).
    for (int64_t n = 0; n < N; n++) {
      G* dst = dwte + int64_t{tokens[n]} * C + c0;
      const T* src = dout + n * C + c0;
      for (int64_t c = 0; c < w; c++)
        dst[c] = from_float<G>(to_float(dst[c]) + to_float(src[c]));
    }
  }
}

#define ENCODER_INSTANTIATE_T(T)                                                             \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t, \
                                   int64_t);

#define ENCODER_INSTANTIATE_TG(T, G) \
  template void encoder_backward<T, G>(G*, G*, const T*, const int32_t*, int64_t, int64_t, int64_t);

FSDPGEN_FOR_EACH_DTYPE(ENCODER_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(ENCODER_INSTANTIATE_TG)
