// fsdpgen_layer_cuda.h: what a custom layer's CUDA entry points receive
// (layers/fsdpgen_layer.h declares them; a layer's .cu file, named in the
// spec's `layers { cuda = "x.cu" }`, defines them and includes this).
//
//   template <class T, class G>
//   void SwiGluMlp<T, G>::forward_cuda(const T* x, T* y, int64_t tokens,
//                                      const fsdpgen::layer::Cuda& cuda) const {
//     cuda_gemm(false, true, tokens, F, C, 1.0f, x, C, gate_w.value, C, 0.0f, gate.data, F,
//               cuda.g);  // runtime/cuda/gemm.h
//     swiglu_forward(hidden.data, gate.data, up.data, tokens * F, cuda.g.stream);  // kernels.cuh
//     ...
//   }
//   FSDPGEN_LAYER_CUDA_INSTANTIATE(SwiGluMlp)
//
// Everything is enqueued on cuda.g.stream and nothing waits: the step is a
// CUDA graph when it can be. The pointers are device memory in the planned
// arena, as the CPU entry points' are host memory.
#pragma once

#include "layers/fsdpgen_layer.h"
#include "runtime/cuda/exec.h"
#include "runtime/dtype.h"
#include "runtime/dtype_pairs.h"

namespace fsdpgen::layer {

// The op's execution state: its stream, cuBLASLt handle and the plan's GEMM
// workspace (runtime/cuda/exec.h), which the CUDA runtime's GEMMs and
// kernels take.
struct Cuda {
  gpu_exec& g;
};

}  // namespace fsdpgen::layer

// Instantiates a layer's CUDA entry points for every parameter and gradient
// type a plan uses (runtime/dtype_pairs.h's pairs: param fp32, bf16 or fp16;
// gradients fp32 or the 16-bit type), so that the generated step finds the
// ones the .cu file defines.
#define FSDPGEN_LAYER_CUDA_INSTANTIATE_TG(Layer, T, G)                                        \
  template void Layer<T, G>::forward_cuda(const T*, T*, int64_t, const fsdpgen::layer::Cuda&) \
      const;                                                                                  \
  template void Layer<T, G>::backward_cuda(const T*, const T*, T*, int64_t,                   \
                                           const fsdpgen::layer::Cuda&) const;
#define FSDPGEN_LAYER_CUDA_INSTANTIATE(Layer) \
  FSDPGEN_FOR_EACH_DTYPE_PAIR_OF(FSDPGEN_LAYER_CUDA_INSTANTIATE_TG, Layer)
