// A second LayerNorm (tests/layers/specs/declared_twice.fsdp imports it with
// tests/layers/custom/layer_norm.h): declarations only.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct LayerNorm {
  struct Hyper {
    int64_t d_model;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model", "ones"> w;
  static constexpr fsdpgen::layer::Flops<"4 * d_model"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
