// scaled_mlp: a layer whose projection is initialized as GPT-2's c_proj is,
// normal(0.02 / sqrt(2 * n_layer)), an expression over a hyper-parameter the
// spec binds to the model's `layers`. Declared only: it is read, never compiled.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct ScaledMlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
    int64_t n_layer;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model, d_ff", "normal(0.02)"> fc_w;
  fsdpgen::layer::Param<T, G, "d_ff, d_model", "normal(0.02 / sqrt(2 * n_layer))"> proj_w;
  static constexpr fsdpgen::layer::Flops<"4 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
