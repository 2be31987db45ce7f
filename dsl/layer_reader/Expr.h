// Expr: the expressions a layer header writes its shapes, per-token extents
// and FLOPs in (layers/fsdpgen_layer.h): integers, hyper-parameter names,
// + - * / and parentheses, evaluated in 64-bit integers. The reader
// (fsdpgen-layers) checks them, pointing at the byte of an error; fsdpgen
// evaluates them with the spec's hyper-parameter values. No LLVM here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen::layers {

struct ExprNode;

// A parsed expression; `text` as written.
struct Expr {
  std::string text;
  std::shared_ptr<const ExprNode> root;
  // The names it uses, in order of first use.
  std::vector<std::string> names() const;
  // Its value with `values` for the names; nullopt with `error` set when a
  // name has no value, a division is by zero or inexact, or a value overflows.
  std::optional<int64_t> eval(const std::map<std::string, int64_t>& values,
                              std::string* error = nullptr) const;
};

// Where a text is wrong: the byte offset into it and what is wrong.
struct ExprError {
  size_t offset = 0;
  std::string message;
};

// Parses one expression; the whole text must be one.
std::optional<Expr> parse_expr(std::string_view text, ExprError* error);
// Parses comma-separated expressions ("d_ff, d_model"): one per dimension;
// `offsets` gets where each starts.
std::optional<std::vector<Expr>> parse_expr_list(std::string_view text, ExprError* error,
                                                 std::vector<size_t>* offsets = nullptr);

// An initialisation: "normal(STD)", "ones" or "zeros". STD is a number or a
// real-valued expression over the layer's hyper-parameters: numbers (1e-3,
// 0.02), names, + - * /, parentheses and sqrt(x), as in
// "normal(0.02 / sqrt(2 * n_layer))" (n_layer bound to the model's `layers`
// in the spec), evaluated in double when the layer is bound.
struct Init {
  enum class Kind { Normal, Ones, Zeros };
  Kind kind = Kind::Normal;
  double std = 0;                  // its value: a number's, or the expression's once bound
  std::string std_text;            // the expression as written ("" for ones and zeros)
  std::vector<std::string> names;  // the hyper-parameters it uses, in order of first use
};
std::optional<Init> parse_init(std::string_view text, ExprError* error);
// The value of an Init's standard deviation with `values` for its names;
// nullopt with `error` naming what is wrong (an unbound name, a division by
// zero, a square root of a negative number, a result that is not a finite
// number of at least 0).
std::optional<double> init_std(const Init& init, const std::map<std::string, int64_t>& values,
                               std::string* error);

}  // namespace fsdpgen::layers
