// elementwise (CUDA): GELU, SwiGLU, GeGLU, rotary positions, the residual
// add and a scale (launchers in kernels.cuh), a thread per value (a pair of values for the
// rotary positions).
#include <cstdint>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/kernels_shared.cuh"
#include "runtime/dtype_pairs.h"
#include "runtime/kernel_math.h"

namespace {

// GELU's formulas: runtime/kernel_math.h, shared with the CPU kernels.
template <class T>
__global__ void gelu_forward_kernel(T* out, const T* inp, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  out[i] = from_float<T>(gelu_of(x, exp_clamped(-2.0f * gelu_tanh_arg(x))));
}

template <class T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float x = to_float(inp[i]);
  const float e = exp_clamped(-2.0f * gelu_tanh_arg(x));
  dinp[i] = from_float<T>(gelu_grad_of(x, e) * to_float(dout[i]));
}

// SwiGLU's formulas: runtime/kernel_math.h, shared with the CPU kernels.
template <class T>
__global__ void swiglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]);
  out[i] = from_float<T>(swiglu_of(g, to_float(up[i]), exp_clamped(-g)));
}

template <class T>
__global__ void swiglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                       int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]), u = to_float(up[i]), dy = to_float(dout[i]);
  const float e = exp_clamped(-g);
  dgate[i] = from_float<T>(dy * swiglu_dgate_of(g, u, e));
  dup[i] = from_float<T>(dy * g / (1.0f + e));
}

// GeGLU: GELU's formulas (runtime/kernel_math.h) on the gate, as the CPU's geglu_*.
template <class T>
__global__ void geglu_forward_kernel(T* out, const T* gate, const T* up, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]);
  out[i] = from_float<T>(gelu_of(g, exp_clamped(-2.0f * gelu_tanh_arg(g))) * to_float(up[i]));
}

template <class T>
__global__ void geglu_backward_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                      int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float g = to_float(gate[i]), dy = to_float(dout[i]);
  const float e = exp_clamped(-2.0f * gelu_tanh_arg(g));
  dgate[i] = from_float<T>(dy * to_float(up[i]) * gelu_grad_of(g, e));
  dup[i] = from_float<T>(dy * gelu_of(g, e));
}

template <class T>
__global__ void scale_kernel(T* x, float scale, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  x[i] = from_float<T>(to_float(x[i]) * scale);
}

// Rotary positions: a thread per pair (i, i + D/2) of a head of a row, turned
// by rope_rotate (or back, with `back`) at the row's position (row % T).
template <class T>
__global__ void rope_kernel(T* x, const float* cos, const float* sin, int64_t N, int64_t T_,
                            int64_t heads, int64_t D, bool back) {
  const int64_t half = D / 2;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= N * heads * half) return;
  const int64_t i = idx % half, row = idx / half;  // row = n * heads + h
  const int64_t t = (row / heads) % T_;
  T* head = x + row * D;
  float x1 = to_float(head[i]), x2 = to_float(head[i + half]);
  if (back)
    rope_unrotate(x1, x2, cos[t * half + i], sin[t * half + i]);
  else
    rope_rotate(x1, x2, cos[t * half + i], sin[t * half + i]);
  head[i] = from_float<T>(x1);
  head[i + half] = from_float<T>(x2);
}

template <class T>
__global__ void residual_forward_kernel(T* out, const T* a, const T* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

}  // namespace

template <class T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                        stream>>>(dev(out), dev(inp), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                         stream>>>(dev(dinp), dev(inp), dev(dout), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                          stream>>>(dev(out), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                     cudaStream_t stream) {
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                           stream>>>(dev(dgate), dev(dup), dev(dout), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void geglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  geglu_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                         stream>>>(dev(out), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void geglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                    cudaStream_t stream) {
  if (n == 0) return;
  geglu_backward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                          stream>>>(dev(dgate), dev(dup), dev(dout), dev(gate), dev(up), n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void scale_in_place(T* x, float scale, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0, stream>>>(
      dev(x), scale, n);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void rope_launch(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                 int64_t D, bool back, cudaStream_t stream) {
  const int64_t pairs = N * heads * (D / 2);
  if (pairs == 0) return;
  rope_kernel<<<grid_dim(ceil_div(pairs, kElementwiseThreads)), kElementwiseThreads, 0, stream>>>(
      dev(x), cos, sin, N, T_, heads, D, back);
  CUDA_CHECK(cudaGetLastError());
}

template <class T>
void rope_forward(T* x, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                  int64_t D, cudaStream_t stream) {
  rope_launch(x, cos, sin, N, T_, heads, D, false, stream);
}

template <class T>
void rope_backward(T* dx, const float* cos, const float* sin, int64_t N, int64_t T_, int64_t heads,
                   int64_t D, cudaStream_t stream) {
  rope_launch(dx, cos, sin, N, T_, heads, D, true, stream);
}

template <class T>
void residual_forward(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  residual_forward_kernel<<<grid_dim(ceil_div(n, kElementwiseThreads)), kElementwiseThreads, 0,
                            stream>>>(dev(out), dev(a), dev(b), n);
  CUDA_CHECK(cudaGetLastError());
}

#define CUDA_ELEMENTWISE_INSTANTIATE_T(T)                                                        \
  template void gelu_forward<T>(T*, const T*, int64_t, cudaStream_t);                            \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                 \
  template void residual_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);              \
  template void swiglu_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, cudaStream_t); \
  template void geglu_forward<T>(T*, const T*, const T*, int64_t, cudaStream_t);                 \
  template void geglu_backward<T>(T*, T*, const T*, const T*, const T*, int64_t, cudaStream_t);  \
  template void scale_in_place<T>(T*, float, int64_t, cudaStream_t);                             \
  template void rope_forward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t,       \
                                int64_t, cudaStream_t);                                          \
  template void rope_backward<T>(T*, const float*, const float*, int64_t, int64_t, int64_t,      \
                                 int64_t, cudaStream_t);

FSDPGEN_FOR_EACH_DTYPE(CUDA_ELEMENTWISE_INSTANTIATE_T)
