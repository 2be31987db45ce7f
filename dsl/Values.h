// Values: readers of one value of the spec (an integer or real in range, a
// bool, a string, a name from a list, `name(args)` with its arguments bound
// to parameter names); each reports what is wrong where the value is written.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// 124439808 -> "124,439,808"
std::string grouped(int64_t v);

// A value as an error names it: "number 3", "a tuple", "'cosine(...)'".
std::string describe(const ast::Value& v);

class ValueReader {
 public:
  explicit ValueReader(Diagnostics& d) : d_(d) {}

  // `what` names the key or argument in errors.
  std::optional<int64_t> as_int(const ast::Value& v, std::string_view what, int64_t lo, int64_t hi);
  // A real number in [lo, hi] (or (lo, hi] when !lo_inclusive).
  std::optional<double> as_float(const ast::Value& v, std::string_view what, double lo, double hi,
                                 bool lo_inclusive);
  std::optional<bool> as_bool(const ast::Value& v, std::string_view what);
  // A non-empty string.
  std::optional<std::string> as_string(const ast::Value& v, std::string_view what);
  std::optional<DType> as_dtype(const ast::Value& v);

  // An identifier from `names`, as E(index); `what` names the kind of thing
  // ("sharding strategy").
  template <class E, size_t N>
  std::optional<E> as_enum(const ast::Value& v, std::string_view what,
                           const std::array<std::string_view, N>& names) {
    std::optional<size_t> i = as_name(v, what, {names.begin(), names.end()});
    if (!i) return std::nullopt;
    return static_cast<E>(*i);
  }

  // Binds a call's arguments to parameter names; absent ones are nullptr.
  std::optional<std::vector<const ast::Value*>> bind(const ast::Value& call,
                                                     const std::vector<std::string_view>& params);

  // True when `arg` of `call` was given; else reports it missing.
  bool require(const ast::Value* arg, const ast::Value& call, std::string_view name);

  // Reads `name` or `name(args)` where name is one of `kinds` and params[k]
  // names kind k's arguments; returns the kind index and the bound arguments
  // (all nullptr for a bare name).
  template <size_t N>
  std::optional<std::pair<size_t, std::vector<const ast::Value*>>> callee(
      const ast::Value& v, std::string_view what, const std::array<std::string_view, N>& kinds,
      const std::array<std::vector<std::string_view>, N>& params) {
    return call_of(v, what, {kinds.begin(), kinds.end()}, {params.begin(), params.end()});
  }

 private:
  std::optional<size_t> as_name(const ast::Value& v, std::string_view what,
                                const std::vector<std::string_view>& names);
  std::optional<std::pair<size_t, std::vector<const ast::Value*>>> call_of(
      const ast::Value& v, std::string_view what, const std::vector<std::string_view>& kinds,
      const std::vector<std::vector<std::string_view>>& params);

  Diagnostics& d_;
};

}  // namespace fsdpgen
