// A header named as tests/layers/custom/layer_norm.h is
// (tests/layers/specs/same_file_name.fsdp): declarations only.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct OtherNorm {
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
