// a layer without its FLOPs
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
  fsdpgen::layer::Saved<T, "d_ff * 2"> s;
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
