// a shape expression that does not parse: the byte of the problem
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model * (d_ff + 1", "zeros"> w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
