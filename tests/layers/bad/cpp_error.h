// a C++ error in the header: Clang's own diagnostic
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  // The missing ';' after w is the error this header is for.
  // clang-format off
  fsdpgen::layer::Param<T, G, "d_model", "ones"> w
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  // clang-format on
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
