// a shape names a hyper-parameter the layer lacks: did-you-mean, at the byte
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model, d_fff", "normal(0.02)"> w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
