// a missing entry point, its misspelling suggested
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model", "ones"> w;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forwad(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
