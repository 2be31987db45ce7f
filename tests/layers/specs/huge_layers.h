// huge_layers: layers whose sizes leave 64 bits or the planner's limits for
// large hyper-parameters (bind_huge_*.fsdp): a square matrix, a matrix whose
// element count overflows, a saved array of n * n * 4 elements per token.
// Declared only: it is read, never compiled.
#pragma once

#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct SquareMlp {
  struct Hyper {
    int64_t d_model;
    int64_t n;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "n, n", "normal(0.02)"> w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};

template <class T, class G>
struct WideMlp {
  struct Hyper {
    int64_t d_model;
    int64_t n;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "n * 8, n * 8", "normal(0.02)"> w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};

template <class T, class G>
struct HoardingMlp {
  struct Hyper {
    int64_t d_model;
    int64_t n;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model, d_model", "normal(0.02)"> w;
  fsdpgen::layer::Saved<T, "n * n * 4"> kept;
  static constexpr fsdpgen::layer::Flops<"2 * d_model"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
