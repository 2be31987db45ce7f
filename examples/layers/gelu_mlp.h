// gelu_mlp: GPT-2's MLP written as a custom layer (layers/fsdpgen_layer.h):
// y = gelu(x @ fc_w + fc_b) @ proj_w + proj_b, the same kernels in the same
// order as the built-in block's mlp.c_fc and mlp.c_proj pieces, so a model
// using it trains as the built-in one does.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/kernels.h"

template <class T, class G>
struct GeluMlp {
  struct Hyper {
    int64_t d_model;  // the block's width
    int64_t d_ff;     // the hidden width
  };
  Hyper hyper;

  // GPT-2's Conv1D: (in, out); Muon's matrices under optimizer = muon(...).
  fsdpgen::layer::Param<T, G, "d_model, d_ff", "normal(0.02)", "muon(in, out)"> fc_w;
  fsdpgen::layer::Param<T, G, "d_ff", "zeros"> fc_b;
  fsdpgen::layer::Param<T, G, "d_ff, d_model", "normal(0.02)", "muon(in, out)"> proj_w;
  fsdpgen::layer::Param<T, G, "d_model", "zeros"> proj_b;

  fsdpgen::layer::Saved<T, "d_ff"> pre;  // x @ fc_w + fc_b, GELU's input
  fsdpgen::layer::Saved<T, "d_ff"> act;  // gelu(pre)
  fsdpgen::layer::Scratch<T, "d_ff"> dact;

  static constexpr fsdpgen::layer::Flops<"4 * d_model * d_ff"> flops{};

  // x (tokens, d_model) -> y (tokens, d_model).
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, F = hyper.d_ff;
    matmul_forward(pre.data, x, fc_w.value, fc_b.value, tokens, C, F, cpu.ws);
    gelu_forward(act.data, pre.data, tokens * F);
    matmul_forward(y, static_cast<const T*>(act.data), proj_w.value, proj_b.value, tokens, F, C,
                   cpu.ws);
  }

  // dy (tokens, d_model) -> dx (tokens, d_model); gradients added.
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, F = hyper.d_ff;
    matmul_backward(dact.data, proj_w.grad, proj_b.grad, dy, static_cast<const T*>(act.data),
                    proj_w.value, tokens, F, C, cpu.ws);
    gelu_backward(dact.data, static_cast<const T*>(pre.data), static_cast<const T*>(dact.data),
                  tokens * F);
    matmul_backward(dx, fc_w.grad, fc_b.grad, static_cast<const T*>(dact.data), x, fc_w.value,
                    tokens, C, F, cpu.ws);
  }
};
