// elementwise (CPU): the pointwise layers (see kernels.h): GELU, SwiGLU, GeGLU and
// the residual add, vectorized loops over exp_clamped.
#include "runtime/cpu/kernels.h"

#include <cmath>

#include "runtime/cpu/kernels_shared.h"
#include "runtime/dtype_pairs.h"

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float x = to_float(inp[i]);
    out[i] = from_float<T>(gelu_of(x, exp_clamped(-2.0f * gelu_tanh_arg(x))));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float x = to_float(inp[i]);
    const float e = exp_clamped(-2.0f * gelu_tanh_arg(x));
    dinp[i] = from_float<T>(gelu_grad_of(x, e) * to_float(dout[i]));
  }
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float g = to_float(gate[i]);
    out[i] = from_float<T>(swiglu_of(g, to_float(up[i]), exp_clamped(-g)));
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float g = to_float(gate[i]), u = to_float(up[i]), dy = to_float(dout[i]);
    const float e = exp_clamped(-g);
    dgate[i] = from_float<T>(dy * swiglu_dgate_of(g, u, e));
    dup[i] = from_float<T>(dy * g / (1.0f + e));
  }
}

template <class T>
void geglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float g = to_float(gate[i]);
    out[i] = from_float<T>(gelu_of(g, exp_clamped(-2.0f * gelu_tanh_arg(g))) * to_float(up[i]));
  }
}

template <class T>
void geglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++) {
    const float g = to_float(gate[i]), dy = to_float(dout[i]);
    const float e = exp_clamped(-2.0f * gelu_tanh_arg(g));
    dgate[i] = from_float<T>(dy * to_float(up[i]) * gelu_grad_of(g, e));
    dup[i] = from_float<T>(dy * gelu_of(g, e));
  }
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for if (n >= kParallelElems)
  for (int64_t i = 0; i < n; i++)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

#define ELEMENTWISE_INSTANTIATE_T(T)                                               \
  template void gelu_forward<T>(T*, const T*, int64_t);                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);                 \
  template void swiglu_forward<T>(T*, const T*, const T*, int64_t);                \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t); \
  template void geglu_forward<T>(T*, const T*, const T*, int64_t);                 \
  template void geglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t);  \
  template void residual_forward<T>(T*, const T*, const T*, int64_t);

FSDPGEN_FOR_EACH_DTYPE(ELEMENTWISE_INSTANTIATE_T)
