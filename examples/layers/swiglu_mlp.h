// swiglu_mlp: Llama's gated MLP as a custom layer for any family
// (layers/fsdpgen_layer.h): y = (silu(x @ gate_w^T) * (x @ up_w^T)) @ down_w^T,
// nn.Linear weights (out, in), no biases. Its CUDA twins are in swiglu_mlp.cu.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/gemm.h"
#include "runtime/kernels.h"

template <class T, class G>
struct SwiGluMlp {
  struct Hyper {
    int64_t d_model;  // the block's width
    int64_t d_ff;     // the hidden width
  };
  Hyper hyper;

  // nn.Linear's (out, in), as llama's; Muon's matrices under optimizer = muon(...).
  fsdpgen::layer::Param<T, G, "d_ff, d_model", "normal(0.02)", "muon(out, in)"> gate_w;
  fsdpgen::layer::Param<T, G, "d_ff, d_model", "normal(0.02)", "muon(out, in)"> up_w;
  fsdpgen::layer::Param<T, G, "d_model, d_ff", "normal(0.02)", "muon(out, in)"> down_w;

  fsdpgen::layer::Saved<T, "d_ff"> gate;    // x @ gate_w^T
  fsdpgen::layer::Saved<T, "d_ff"> up;      // x @ up_w^T
  fsdpgen::layer::Saved<T, "d_ff"> hidden;  // silu(gate) * up
  fsdpgen::layer::Scratch<T, "2 * d_ff"> dgate_up;

  static constexpr fsdpgen::layer::Flops<"6 * d_model * d_ff"> flops{};

  // x (tokens, d_model) -> y (tokens, d_model). gemm (runtime/gemm.h):
  // row-major C = op(A) op(B); x @ w^T for an (out, in) weight.
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, F = hyper.d_ff;
    gemm(false, true, tokens, F, C, 1.0f, x, C, gate_w.value, C, 0.0f, gate.data, F, cpu.ws);
    gemm(false, true, tokens, F, C, 1.0f, x, C, up_w.value, C, 0.0f, up.data, F, cpu.ws);
    swiglu_forward(hidden.data, static_cast<const T*>(gate.data), static_cast<const T*>(up.data),
                   tokens * F);
    gemm(false, true, tokens, C, F, 1.0f, static_cast<const T*>(hidden.data), F, down_w.value, F,
         0.0f, y, C, cpu.ws);
  }

  // dy (tokens, d_model) -> dx (tokens, d_model); gradients added.
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, F = hyper.d_ff;
    T* dgate = dgate_up.data;             // (tokens, d_ff)
    T* dup = dgate_up.data + tokens * F;  // (tokens, d_ff): first d(hidden), then d(up)
    gemm(false, false, tokens, F, C, 1.0f, dy, C, down_w.value, F, 0.0f, dup, F, cpu.ws);
    gemm(true, false, C, F, tokens, 1.0f, dy, C, static_cast<const T*>(hidden.data), F, 1.0f,
         down_w.grad, F, cpu.ws);
    // Element by element, d(hidden) is read before d(up) overwrites it.
    swiglu_backward(dgate, dup, static_cast<const T*>(dup), static_cast<const T*>(gate.data),
                    static_cast<const T*>(up.data), tokens * F);
    gemm(false, false, tokens, C, F, 1.0f, static_cast<const T*>(dgate), F, gate_w.value, C, 0.0f,
         dx, C, cpu.ws);
    gemm(false, false, tokens, C, F, 1.0f, static_cast<const T*>(dup), F, up_w.value, C, 1.0f, dx,
         C, cpu.ws);
    gemm(true, false, F, C, tokens, 1.0f, static_cast<const T*>(dgate), F, x, C, 1.0f, gate_w.grad,
         C, cpu.ws);
    gemm(true, false, F, C, tokens, 1.0f, static_cast<const T*>(dup), F, x, C, 1.0f, up_w.grad, C,
         cpu.ws);
  }

  // The same on the GPU (swiglu_mlp.cu), for --target cuda.
  void forward_cuda(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cuda& cuda) const;
  void backward_cuda(const T* x, const T* dy, T* dx, int64_t tokens,
                     const fsdpgen::layer::Cuda& cuda) const;
};
