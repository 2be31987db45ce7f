// halved_mlp: a layer whose shapes are expressions of its hyper-parameters
// (d_ff / 2, d_ff - d_model), for the specs whose values it cannot be bound
// to (bind_errors_*.fsdp). Declared only: it is read, never compiled.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct HalvedMlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_ff / 2, d_model", "normal(0.02)"> in_w;
  fsdpgen::layer::Param<T, G, "d_model, d_ff - d_model", "normal(0.02)"> out_w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
