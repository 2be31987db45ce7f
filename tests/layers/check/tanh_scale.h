// tanh_scale: a small correct layer with its own loops, y = tanh(x * w) + b
// per channel, that CheckLayerTest breaks one line at a time (each mutation
// is a bug `fsdpgen check-layer` must name). It compiles with T = double, so
// its gradients are checked in double.
#pragma once

#include <cmath>
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct TanhScale {
  struct Hyper {
    int64_t d_model;
  };
  Hyper hyper;

  fsdpgen::layer::Param<T, G, "d_model", "ones"> w;
  fsdpgen::layer::Param<T, G, "d_model", "zeros"> b;
  fsdpgen::layer::Saved<T, "d_model"> t;       // tanh(x * w)
  fsdpgen::layer::Scratch<T, "d_model"> dpre;  // dy * (1 - t^2)

  static constexpr fsdpgen::layer::Flops<"4 * d_model"> flops{};

  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    const int64_t C = hyper.d_model;
    for (int64_t i = 0; i < tokens * C; ++i) {
      t.data[i] = std::tanh(x[i] * w.value[i % C]);
      y[i] = t.data[i] + b.value[i % C];
    }
  }

  void backward(const T* x, const T* dy, T* dx, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    const int64_t C = hyper.d_model;
    for (int64_t i = 0; i < tokens * C; ++i)
      dpre.data[i] = dy[i] * (1 - t.data[i] * t.data[i]);
    for (int64_t i = 0; i < tokens * C; ++i) {
      w.grad[i % C] += dpre.data[i] * x[i];
      b.grad[i % C] += dy[i];
      dx[i] = dpre.data[i] * w.value[i % C];
    }
  }
};
