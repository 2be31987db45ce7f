// adapter: a bottleneck adapter (Houlsby et al., 2019) added after a block's
// MLP as a custom layer (layers/fsdpgen_layer.h): the block's output h becomes
// h + up(gelu(down(h))). The up projection starts at zero, so a model with
// adapters starts as the model without them.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/kernels.h"

template <class T, class G>
struct Adapter {
  struct Hyper {
    int64_t d_model;  // the block's width
    int64_t rank;     // the bottleneck's
  };
  Hyper hyper;

  fsdpgen::layer::Param<T, G, "d_model, rank", "normal(0.02)", "muon(in, out)">
      down_w;  // (in, out)
  fsdpgen::layer::Param<T, G, "rank", "zeros"> down_b;
  fsdpgen::layer::Param<T, G, "rank, d_model", "zeros", "muon(in, out)"> up_w;
  fsdpgen::layer::Param<T, G, "d_model", "zeros"> up_b;

  fsdpgen::layer::Saved<T, "rank"> pre;  // down(h)
  fsdpgen::layer::Saved<T, "rank"> act;  // gelu(pre)
  fsdpgen::layer::Scratch<T, "rank"> dact;

  static constexpr fsdpgen::layer::Flops<"4 * d_model * rank"> flops{};

  // x (tokens, d_model) -> y (tokens, d_model); the block adds x back.
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, R = hyper.rank;
    matmul_forward(pre.data, x, down_w.value, down_b.value, tokens, C, R, cpu.ws);
    gelu_forward(act.data, static_cast<const T*>(pre.data), tokens * R);
    matmul_forward(y, static_cast<const T*>(act.data), up_w.value, up_b.value, tokens, R, C,
                   cpu.ws);
  }

  // dy (tokens, d_model) -> dx (tokens, d_model); gradients added.
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const {
    const int64_t C = hyper.d_model, R = hyper.rank;
    matmul_backward(dact.data, up_w.grad, up_b.grad, dy, static_cast<const T*>(act.data),
                    up_w.value, tokens, R, C, cpu.ws);
    gelu_backward(dact.data, static_cast<const T*>(pre.data), static_cast<const T*>(dact.data),
                  tokens * R);
    matmul_backward(dx, down_w.grad, down_b.grad, static_cast<const T*>(dact.data), x, down_w.value,
                    tokens, C, R, cpu.ws);
  }
};
