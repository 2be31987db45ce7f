// layer_norm: GPT-2's LayerNorm written as a custom layer, for gpt2's ln_1 or
// ln_2 (tests/e2e/CustomLayerTest: the model trains as the built-in one).
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/kernels.h"

template <class T, class G>
struct LayerNorm {
  struct Hyper {
    int64_t d_model;
  };
  Hyper hyper;

  fsdpgen::layer::Param<T, G, "d_model", "ones"> w;
  fsdpgen::layer::Param<T, G, "d_model", "zeros"> b;

  fsdpgen::layer::SavedF32<"1"> mean;  // per token
  fsdpgen::layer::SavedF32<"1"> rstd;

  static constexpr fsdpgen::layer::Flops<"8 * d_model"> flops{};

  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    layernorm_forward(y, mean.data, rstd.data, x, w.value, b.value, tokens, hyper.d_model);
  }

  void backward(const T* x, const T* dy, T* dx, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    layernorm_backward(dx, w.grad, b.grad, dy, x, w.value, static_cast<const float*>(mean.data),
                       static_cast<const float*>(rstd.data), tokens, hyper.d_model, false);
  }
};
