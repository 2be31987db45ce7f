// BlockLayout: a gpt2 block's tensors as the runtime lays them out in a
// flat buffer (runtime/gpt2.h's gpt2_block_params_at / gpt2_block_grads_at),
// to and from Reference.h's double-precision block, for the CPU and CUDA
// layer tests.
#pragma once

#include <cstdint>
#include <vector>

#include "Reference.h"
#include "runtime/cpu/gpt2.h"
#include "runtime/model/layout.h"

namespace ref {

inline gpt2_dims to_gpt2(const dims& d) {
  return gpt2_dims{d.B, d.T, d.C, d.H, d.F, d.V};
}

// Elements of each block tensor, in the runtime's order.
inline std::vector<int64_t> block_tensor_elems(const dims& d) {
  const int64_t C = d.C, F = d.F;
  return {C, C, C * 3 * C, 3 * C, C * C, C, C, C, C * F, F, F * C, C};
}

// Elements of the flat buffer: each tensor starts on a kTensorAlignElems boundary.
inline int64_t block_flat_elems(const dims& d) {
  int64_t n = 0;
  for (int64_t e : block_tensor_elems(d))
    n = fsdpgen::model::round_up(n + e, fsdpgen::model::kTensorAlignElems);
  return n;
}

template <class G>
std::vector<G*> block_pointers(const gpt2_block_grads<G>& g) {
  return {g.ln1_w, g.ln1_b, g.qkv_w, g.qkv_b, g.proj_w, g.proj_b,
          g.ln2_w, g.ln2_b, g.fc_w,  g.fc_b,  g.fc2_w,  g.fc2_b};
}

// A block's flat parameter (or gradient) buffer holding p.
template <class T>
std::vector<T> block_flat(const block_params& p, const dims& d) {
  std::vector<T> flat(static_cast<size_t>(block_flat_elems(d)), from_float<T>(0.0f));
  const auto ptrs = block_pointers(gpt2_block_grads_at<T>(flat.data(), to_gpt2(d)));
  const auto& tensors = block_tensors();
  for (size_t i = 0; i < tensors.size(); i++) {
    const vec& v = p.*tensors[i].member;
    for (size_t j = 0; j < v.size(); j++)
      ptrs[i][j] = from_float<T>(static_cast<float>(v[j]));
  }
  return flat;
}

// The block tensors of a flat buffer, as doubles.
template <class T>
block_params block_unflat(std::vector<T>& flat, const dims& d) {
  const auto ptrs = block_pointers(gpt2_block_grads_at<T>(flat.data(), to_gpt2(d)));
  const auto elems = block_tensor_elems(d);
  block_params p;
  for (size_t i = 0; i < ptrs.size(); i++)
    p.*block_tensors()[i].member = load(ptrs[i], elems[i]);
  return p;
}

}  // namespace ref
