// initialisations whose STD expression uses a name that is not a
// hyper-parameter, or does not parse
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_ff", "normal(0.02 / sqrt(2 * n_layer))"> c;
  fsdpgen::layer::Param<T, G, "d_ff", "normal(0.02 / sqrt(2 * d_ff)"> d;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
