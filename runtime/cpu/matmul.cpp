// matmul (CPU): the linear layers and LM head (see kernels.h), products on
// gemm(), bias gradients as column sums.
#include "runtime/cpu/kernels.h"

#include <algorithm>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

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

#define MATMUL_INSTANTIATE_T(T)                                                                \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                  const gemm_workspace&);                                      \
  template void lm_head_forward<T>(T*, const T*, const T*, int64_t, int64_t, int64_t,          \
                                   const gemm_workspace&);

#define MATMUL_INSTANTIATE_TG(T, G)                                                               \
  template void matmul_backward<T, G>(T*, G*, G*, const T*, const T*, const T*, int64_t, int64_t, \
                                      int64_t, const gemm_workspace&);                            \
  template void lm_head_backward<T, G>(T*, G*, const T*, const T*, const T*, int64_t, int64_t,    \
                                       int64_t, const gemm_workspace&);

FSDPGEN_FOR_EACH_DTYPE(MATMUL_INSTANTIATE_T)
FSDPGEN_FOR_EACH_DTYPE_PAIR(MATMUL_INSTANTIATE_TG)
