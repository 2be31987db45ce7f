// swiglu_mlp.cu: SwiGluMlp's CUDA entry points (swiglu_mlp.h), the same GEMMs
// and elementwise steps as its CPU ones through the CUDA runtime's cuBLASLt
// GEMM (runtime/cuda/gemm.h) and SwiGLU kernels (runtime/cuda/kernels.cuh),
// enqueued on the op's stream. A spec names this file beside the header:
// layers { import = "swiglu_mlp.h"  cuda = "swiglu_mlp.cu"  mlp = SwiGluMlp(...) }
#include "examples/layers/swiglu_mlp.h"
#include "layers/fsdpgen_layer_cuda.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/kernels.cuh"

template <class T, class G>
void SwiGluMlp<T, G>::forward_cuda(const T* x, T* y, int64_t tokens,
                                   const fsdpgen::layer::Cuda& cuda) const {
  const int64_t C = hyper.d_model, F = hyper.d_ff;
  cuda_gemm(false, true, tokens, F, C, 1.0f, x, C, gate_w.value, C, 0.0f, gate.data, F, cuda.g);
  cuda_gemm(false, true, tokens, F, C, 1.0f, x, C, up_w.value, C, 0.0f, up.data, F, cuda.g);
  swiglu_forward(hidden.data, static_cast<const T*>(gate.data), static_cast<const T*>(up.data),
                 tokens * F, cuda.g.stream);
  cuda_gemm(false, true, tokens, C, F, 1.0f, static_cast<const T*>(hidden.data), F, down_w.value, F,
            0.0f, y, C, cuda.g);
}

template <class T, class G>
void SwiGluMlp<T, G>::backward_cuda(const T* x, const T* dy, T* dx, int64_t tokens,
                                    const fsdpgen::layer::Cuda& cuda) const {
  const int64_t C = hyper.d_model, F = hyper.d_ff;
  T* dgate = dgate_up.data;             // (tokens, d_ff)
  T* dup = dgate_up.data + tokens * F;  // (tokens, d_ff): first d(hidden), then d(up)
  cuda_gemm(false, false, tokens, F, C, 1.0f, dy, C, down_w.value, F, 0.0f, dup, F, cuda.g);
  cuda_gemm(true, false, C, F, tokens, 1.0f, dy, C, static_cast<const T*>(hidden.data), F, 1.0f,
            down_w.grad, F, cuda.g);
  // Element by element, d(hidden) is read before d(up) overwrites it.
  swiglu_backward(dgate, dup, static_cast<const T*>(dup), static_cast<const T*>(gate.data),
                  static_cast<const T*>(up.data), tokens * F, cuda.g.stream);
  cuda_gemm(false, false, tokens, C, F, 1.0f, static_cast<const T*>(dgate), F, gate_w.value, C,
            0.0f, dx, C, cuda.g);
  cuda_gemm(false, false, tokens, C, F, 1.0f, static_cast<const T*>(dup), F, up_w.value, C, 1.0f,
            dx, C, cuda.g);
  cuda_gemm(true, false, F, C, tokens, 1.0f, static_cast<const T*>(dgate), F, x, C, 1.0f,
            gate_w.grad, C, cuda.g);
  cuda_gemm(true, false, F, C, tokens, 1.0f, static_cast<const T*>(dup), F, x, C, 1.0f, up_w.grad,
            C, cuda.g);
}

FSDPGEN_LAYER_CUDA_INSTANTIATE(SwiGluMlp)
