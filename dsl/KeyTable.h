// KeyTable: the one list of each section's keys, in order. Each key says how
// its value is read (FieldReader) and how it is printed back, so the reader
// (Fields.cpp), the printer (Print.cpp) and the "valid keys are" note all
// follow the same table. A simple key (int, real, bool, enum, dtype) is one
// line of a table; a complex value (an optimizer call, a data source, a
// block) names its own reader and printer.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "dsl/Ast.h"
#include "dsl/CheckContext.h"
#include "dsl/Literals.h"
#include "dsl/Values.h"

namespace fsdpgen {

// Reads entries against key tables into ctx.spec, recording in ctx.keys where
// each key was written; the complex values' readers are its members
// (Fields.cpp).
class FieldReader {
 public:
  explicit FieldReader(CheckContext& ctx)
      : diags(ctx.diags),
        vals(ctx.diags),
        spec(ctx.spec),
        keys(ctx.keys),
        syntax_errors(ctx.after_syntax_errors) {}

  // Reads entries against a table's keys (`read(i, e)` reads key i);
  // reports duplicates and unknown keys.
  void read_entries(const std::vector<ast::Entry>& entries,
                    const std::vector<std::string_view>& names,
                    const std::function<void(size_t, const ast::Entry&)>& read,
                    const std::string& section, const std::string& prefix);
  template <class S, class Table>
  void read_fields(const std::vector<ast::Entry>& entries, const Table& table, S& out,
                   const std::string& section, const std::string& prefix) {
    std::vector<std::string_view> names;
    for (const auto& k : table)
      names.push_back(k.name);
    read_entries(
        entries, names, [&](size_t i, const ast::Entry& e) { table[i].read(*this, e, out); },
        section, prefix);
  }

  // The value of `key = value`; a block or call given instead is an error.
  const ast::Value* value_of(const ast::Entry& e);
  // The entries of `key { ... }`; anything else is an error.
  const std::vector<ast::Entry>* block_of(const ast::Entry& e, std::string_view example);

  void read_optimizer(const ast::Value& v);
  void read_lr_schedule(const ast::Value& v);
  void read_data(const ast::Value& v, DataSpec& d, std::string_view key);
  void read_loss_scale(const ast::Value& v, LossScaleSpec& l);
  void read_checkpoint(const ast::Entry& e);
  void read_guard(const ast::Entry& e);
  void read_offload(const ast::Entry& e, ParallelSpec& p);
  std::optional<RopeScalingSpec> read_rope_scaling(const ast::Value& v);

  Diagnostics& diags;
  ValueReader vals;
  Spec& spec;
  Keys& keys;
  bool syntax_errors;
  std::string prefix;  // of the keys being read: "parallel."

 private:
  void read_adamw_rest(const std::vector<const ast::Value*>& args, AdamWSpec& a);
  void read_muon(const std::vector<const ast::Value*>& args, OptimizerSpec& o);
  void read_betas(const ast::Value& v, AdamWSpec& a);
};

// One key of a section whose values live in S.
template <class S>
struct Key {
  std::string_view name;
  std::function<void(FieldReader&, const ast::Entry&, S&)> read;
  // The entry as printed, without indent: "vocab = 256", "guard { ... }".
  std::function<std::string(const S&)> print;
  // Printed only when this holds (kv_heads: llama only); null: always.
  std::function<bool(const S&)> shown = nullptr;

  Key& when(std::function<bool(const S&)> f) {
    shown = std::move(f);
    return *this;
  }
};
template <class S>
using KeyTable = std::vector<Key<S>>;

const KeyTable<ModelSpec>& model_keys();
const KeyTable<ParallelSpec>& parallel_keys();
const KeyTable<TrainSpec>& train_keys();
const KeyTable<GuardSpec>& guard_keys();
// offload { params = cpu  activations = cpu }
struct OffloadBlock {
  Offload params = Offload::None;
  Offload activations = Offload::None;
};
const KeyTable<OffloadBlock>& offload_keys();

// The shown entries of a table, printed, in the table's order.
template <class S>
std::vector<std::string> print_keys(const KeyTable<S>& table, const S& s) {
  std::vector<std::string> out;
  for (const Key<S>& k : table)
    if (!k.shown || k.shown(s)) out.push_back(k.print(s));
  return out;
}

// --- the simple keys: `name = value` read and printed from one member ---

// `read(r, value, key)` gives an optional T; `text(T)` prints it.
template <class S, class T, class Read, class Text>
Key<S> value_key(std::string_view name, T S::*m, Read read, Text text) {
  return {name,
          [m, read](FieldReader& r, const ast::Entry& e, S& s) {
            if (const ast::Value* v = r.value_of(e))
              if (auto x = read(r, *v, e.key)) s.*m = *x;
          },
          [name, m, text](const S& s) { return fmt::format("{} = {}", name, text(s.*m)); }};
}
template <class S>
Key<S> int_key(std::string_view name, int64_t S::*m, int64_t lo, int64_t hi) {
  return value_key(
      name, m,
      [lo, hi](FieldReader& r, const ast::Value& v, const std::string& k) {
        return r.vals.as_int(v, k, lo, hi);
      },
      [](int64_t x) { return fmt::format("{}", x); });
}
// A real in [lo, hi] (or (lo, hi] when !lo_inclusive).
template <class S>
Key<S> real_key(std::string_view name, double S::*m, double lo, double hi, bool lo_inclusive) {
  return value_key(
      name, m,
      [lo, hi, lo_inclusive](FieldReader& r, const ast::Value& v, const std::string& k) {
        return r.vals.as_float(v, k, lo, hi, lo_inclusive);
      },
      [](double x) { return format_real(x); });
}
template <class S>
Key<S> bool_key(std::string_view name, bool S::*m) {
  return value_key(
      name, m,
      [](FieldReader& r, const ast::Value& v, const std::string& k) {
        return r.vals.as_bool(v, k);
      },
      [](bool x) { return fmt::format("{}", x); });
}
// `what` names the kind of value in errors ("sharding strategy").
template <class S, class E, size_t N>
Key<S> enum_key(std::string_view name, E S::*m, std::string_view what,
                const std::array<std::string_view, N>& names) {
  return value_key(
      name, m,
      [what, &names](FieldReader& r, const ast::Value& v, const std::string&) {
        return r.vals.as_enum<E>(v, what, names);
      },
      [](E x) { return std::string(to_string(x)); });
}
template <class S>
Key<S> dtype_key(std::string_view name, DType S::*m) {
  return value_key(
      name, m,
      [](FieldReader& r, const ast::Value& v, const std::string&) { return r.vals.as_dtype(v); },
      [](DType x) { return std::string(to_string(x)); });
}

// --- the complex keys: their own reader and printer ---

template <class S>
Key<S> custom_key(std::string_view name,
                  std::function<void(FieldReader&, const ast::Entry&, S&)> read,
                  std::function<std::string(const S&)> print) {
  return {name, std::move(read), std::move(print)};
}

// `name { a = x  b = y }`: a block of the sub-table `table` over S::*m,
// printed on one line; `example` is the block the error for `name = v` shows.
template <class S, class B>
Key<S> block_key(std::string_view name, B S::*m, const KeyTable<B>& (*table)(),
                 std::string_view example) {
  return {name,
          [name, m, table, example](FieldReader& r, const ast::Entry& e, S& s) {
            if (auto* es = r.block_of(e, example))
              r.read_fields(*es, table(), s.*m, fmt::format("'{}'", name),
                            r.prefix + std::string(name) + ".");
          },
          [name, m, table](const S& s) {
            return fmt::format("{} {{ {} }}", name, fmt::join(print_keys(table(), s.*m), "  "));
          }};
}

}  // namespace fsdpgen
