// LayerDecl: a custom layer as the planner sees it (DESIGN §9), read from the
// JSON fsdpgen-layers prints for a header (layer_reader/clang/Reader.cpp), and a
// layer bound to hyper-parameter values: its tensors' shapes, its saved and
// scratch bytes per token, its forward FLOPs per token. No LLVM here:
// fsdpgen runs the reader (layers/ReadLayers.h) and reads its output.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/layer_reader/Expr.h"

namespace fsdpgen::layers {

// Which optimizer = muon(...) gives a parameter (Param's Optimizer): the
// nested AdamW, or Muon with the matrix's rows its outputs or its inputs.
enum class MuonRole { None, OutIn, InOut };

// Where a member's text (a shape, an extent, the FLOPs) is written in its
// header, as the reader found it: for messages about its value once bound.
struct HeaderAt {
  int64_t line = 0, column = 0;  // 1-based (column in bytes); line 0: unknown
  std::string source;            // that line of the header
};

struct LayerParamDecl {
  std::string name;         // the member's name
  std::vector<Expr> shape;  // one or two dimensions, row-major
  Init init;
  MuonRole muon = MuonRole::None;
  HeaderAt at;  // its shape's text
};

// A Saved or Scratch member: (tokens, per_token) elements of the parameter
// type, or of fp32.
struct LayerArrayDecl {
  std::string name;
  Expr per_token;
  bool fp32 = false;
  HeaderAt at;  // its extent's text
};

struct LayerDecl {
  std::string name;  // the class template's
  int64_t line = 0;  // where it is declared in its header
  std::vector<std::string> hyper;
  std::vector<LayerParamDecl> params;
  std::vector<LayerArrayDecl> saved, scratch;
  Expr flops;         // forward, per token
  HeaderAt flops_at;  // its text
  bool cuda = false;  // forward_cuda and backward_cuda are declared
};

// "HEADER:LINE:COLUMN: MESSAGE", then the line and a caret under the column,
// as Clang shows a place ("   12 | ..." and "      |   ^"); "HEADER: MESSAGE"
// when the place is unknown.
std::string header_excerpt(const std::string& header, const HeaderAt& at,
                           const std::string& message);

// The layers of one header, from the reader's JSON; nullopt with `error`
// naming what is missing or malformed.
std::optional<std::vector<LayerDecl>> parse_layer_json(std::string_view json, std::string* error);

// The most elements a bound layer's parameter tensors hold together, and its
// saved and scratch arrays per token: far past any real layer, and small
// enough that the planner's byte counts (times layers, tokens and bytes per
// element) stay far from int64 overflow.
constexpr int64_t kMaxLayerElems = int64_t{1} << 40;  // its messages say 2^40

// A layer with a value for each of its hyper-parameters.
struct BoundLayer {
  const LayerDecl* decl = nullptr;
  std::map<std::string, int64_t> hyper;
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    Init init;
    MuonRole muon = MuonRole::None;
    int64_t elems() const;
  };
  std::vector<Tensor> tensors;
  int64_t saved_bytes_per_token(int64_t param_bytes) const;
  int64_t scratch_bytes_per_token(int64_t param_bytes) const;
  int64_t flops_per_token = 0;
  std::vector<int64_t> saved_per_token, scratch_per_token;  // elements, per member
};

// Binds `decl` to `values` (every hyper-parameter needs one; others are
// errors): shapes, extents and FLOPs evaluated in checked arithmetic, each
// dimension and extent at least 1, the tensors' elements and the extents'
// sum at most kMaxLayerElems. nullopt with `error` naming the member and what
// is wrong, and, when `at` is given, *at where that member's text is in the
// header (nullptr for a problem of the values alone).
std::optional<BoundLayer> bind_layer(const LayerDecl& decl,
                                     const std::map<std::string, int64_t>& values,
                                     std::string* error, const HeaderAt** at = nullptr);

}  // namespace fsdpgen::layers
