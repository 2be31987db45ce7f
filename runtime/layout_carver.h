// layout_carver: pointers into a slot of saved activations (or scratch) and
// into a block's flat tensors, as a family's tables in runtime/model/layout.h lay
// them out. runtime/cpu/gpt2.cpp and runtime/cpu/llama.cpp carve with these, the
// planner totals the same tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/model/layout.h"

// The arrays of a slot over `tokens` tokens: fp32 rows and param-dtype rows.
struct slot_carver {
  fsdpgen::model::Table<fsdpgen::model::Field> table;
  fsdpgen::model::Dims dims;
  int64_t tokens;
  int64_t param_bytes;
  std::byte* base;
  // The named array as X: float for fp32 rows, the param type for the
  // others; null where the attention layout has no such array.
  template <class X>
  X* at(const char* name) const {
    namespace model = fsdpgen::model;
    const size_t row = model::index_of(table, name);
    if (model::elem_bytes(table[row].elem, param_bytes) != static_cast<int64_t>(sizeof(X)))
      throw std::logic_error(std::string("saved array ") + name + " taken as the wrong type");
    if (!model::present(table[row], dims)) return nullptr;
    return reinterpret_cast<X*>(base + model::offset_bytes(table, row, dims, tokens, param_bytes));
  }
};

// A block's tensors in a flat parameter (or gradient) buffer from its first.
template <class P>
struct tensor_carver {
  fsdpgen::model::Table<fsdpgen::model::Tensor> table;
  fsdpgen::model::Dims dims;
  P* base;
  P* at(const char* name) const {
    return base + fsdpgen::model::offset_elems(table, fsdpgen::model::index_of(table, name), dims);
  }
};
