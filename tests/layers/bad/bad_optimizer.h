// an optimizer that is not "adamw", "muon(out, in)" or "muon(in, out)"; Muon on a vector
#include <cstdint>

#include "layers/fsdpgen_layer.h"

template <class T, class G>
struct Mlp {
  struct Hyper {
    int64_t d_model;
    int64_t d_ff;
  };
  Hyper hyper;
  fsdpgen::layer::Param<T, G, "d_model, d_ff", "normal(0.02)", "muon(rows, cols)"> w;
  fsdpgen::layer::Param<T, G, "d_ff", "zeros", "muon(out, in)"> b;
  fsdpgen::layer::Param<T, G, "d_ff, d_model", "normal(0.02)", "sgd"> v;
  static constexpr fsdpgen::layer::Flops<"2 * d_model * d_ff"> flops{};
  void forward(const T* x, T* y, int64_t tokens, const fsdpgen::layer::Cpu& cpu) const;
  void backward(const T* x, const T* dy, T* dx, int64_t tokens,
                const fsdpgen::layer::Cpu& cpu) const;
};
