// dtype_pairs: the storage types and the (param, grad) type pairs the runtimes
// have kernels for, written once. Every explicit instantiation list (CPU, CUDA,
// custom layers), the calibration's dtype check and the planner's check of a
// spec's precision expand these lists, so a pair cannot be planned that no
// kernel was built for. Free of MPI and CUDA: the planner and nvcc include it.
#pragma once

#include <string_view>

#include "runtime/dtype.h"

// X(H) for each 16-bit storage type (runtime/dtype.h). bf16 and fp16 never
// meet in one plan: each pairs only with fp32 and itself.
#define FSDPGEN_FOR_EACH_HALF_DTYPE(X) FSDPGEN_HALF_DTYPES_(FSDPGEN_DTYPE_CALL_, X, )

// X(T) for each storage type of params, activations and gradients.
#define FSDPGEN_FOR_EACH_DTYPE(X) X(float) FSDPGEN_FOR_EACH_HALF_DTYPE(X)

// X(T, G) for each pair of param type T and gradient type G: fp32 with fp32,
// and for each 16-bit type H: (fp32, H), (H, fp32), (H, H).
#define FSDPGEN_FOR_EACH_DTYPE_PAIR(X) FSDPGEN_FOR_EACH_DTYPE_PAIR_OF(FSDPGEN_DTYPE_DROP_FIRST_, X)

// The same pairs as X(A, T, G), passing A through (a layer's name, say:
// a macro cannot take a partly applied one).
#define FSDPGEN_FOR_EACH_DTYPE_PAIR_OF(X, A) \
  X(A, float, float) FSDPGEN_HALF_DTYPES_(FSDPGEN_DTYPE_PAIRS_WITH_HALF_, X, A)

// The list of 16-bit types itself, M(X, A, H) for each, and the helpers that
// turn it into the lists above.
#define FSDPGEN_HALF_DTYPES_(M, X, A) M(X, A, bf16) M(X, A, fp16)
#define FSDPGEN_DTYPE_CALL_(X, A, H) X(H)
#define FSDPGEN_DTYPE_PAIRS_WITH_HALF_(X, A, H) X(A, float, H) X(A, H, float) X(A, H, H)
#define FSDPGEN_DTYPE_DROP_FIRST_(X, T, G) X(T, G)

namespace fsdpgen::dtype_pairs_detail {

// A storage type's name in specs and profiles ("fp32", "bf16", "fp16") from
// its C++ name.
constexpr std::string_view spec_name(std::string_view cpp_name) {
  return cpp_name == "float" ? std::string_view("fp32") : cpp_name;
}

struct name_pair {
  std::string_view param, grad;
};

#define FSDPGEN_DTYPE_NAME_PAIR_(T, G) name_pair{spec_name(#T), spec_name(#G)},
inline constexpr name_pair kPairs[] = {FSDPGEN_FOR_EACH_DTYPE_PAIR(FSDPGEN_DTYPE_NAME_PAIR_)};
#undef FSDPGEN_DTYPE_NAME_PAIR_

}  // namespace fsdpgen::dtype_pairs_detail

namespace fsdpgen {

// Whether the runtimes have kernels for params of dtype `param` and gradients
// of dtype `grad`, by their spec names ("fp32", "bf16", "fp16").
constexpr bool has_dtype_pair(std::string_view param, std::string_view grad) {
  for (const dtype_pairs_detail::name_pair& p : dtype_pairs_detail::kPairs)
    if (p.param == param && p.grad == grad) return true;
  return false;
}

// The same, by C++ type (float, bf16, fp16): whether kernels of <T, G> are built.
template <class T, class G>
inline constexpr bool kHasDtypePair = false;
#define FSDPGEN_DTYPE_PAIR_TRAIT_(T, G) \
  template <>                           \
  inline constexpr bool kHasDtypePair<T, G> = true;
FSDPGEN_FOR_EACH_DTYPE_PAIR(FSDPGEN_DTYPE_PAIR_TRAIT_)
#undef FSDPGEN_DTYPE_PAIR_TRAIT_

}  // namespace fsdpgen
