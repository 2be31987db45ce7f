// rms_norm: llama's RMSNorm (epsilon 1e-5) written as a custom layer, for
// input_layernorm or post_attention_layernorm (tests/e2e/CustomLayerTest: the
// model trains as the built-in one).
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"
#include "runtime/kernels.h"

template <class T, class G>
struct RmsNorm {
  struct Hyper {
    int64_t d_model;
  };
  Hyper hyper;

  fsdpgen::layer::Param<T, G, "d_model", "ones"> w;

  fsdpgen::layer::SavedF32<"1"> rstd;  // per token

  static constexpr fsdpgen::layer::Flops<"4 * d_model"> flops{};

  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    rmsnorm_forward(y, rstd.data, x, w.value, tokens, hyper.d_model, 1e-5f);
  }

  void backward(const T* x, const T* dy, T* dx, int64_t tokens, const fsdpgen::layer::Cpu&) const {
    rmsnorm_backward(dx, w.grad, dy, x, w.value, static_cast<const float*>(rstd.data), tokens,
                     hyper.d_model, false);
  }
};
