// Values: the readers of one spec value; see Values.h.
#include "dsl/Values.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

// "optimizer" -> "an optimizer"
std::string with_article(std::string_view noun) {
  bool vowel = !noun.empty() && std::string_view("aeiou").find(noun[0]) != std::string_view::npos;
  return fmt::format("{} {}", vowel ? "an" : "a", noun);
}

}  // namespace

// 124439808 -> "124,439,808"
std::string grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string describe(const ast::Value& v) {
  switch (v.kind) {
    case ast::Value::Kind::Number:
      return "number " + v.text;
    case ast::Value::Kind::String:
      return "a string";
    case ast::Value::Kind::Ident:
      return fmt::format("'{}'", v.text);
    case ast::Value::Kind::Tuple:
      return "a tuple";
    case ast::Value::Kind::List:
      return "a list";
    case ast::Value::Kind::Range:
      return "a range";
    case ast::Value::Kind::Call:
      return fmt::format("'{}(...)'", v.text);
  }
  return "a value";
}

std::optional<int64_t> ValueReader::as_int(const ast::Value& v, std::string_view what, int64_t lo,
                                           int64_t hi) {
  if (v.kind != ast::Value::Kind::Number) {
    d_.error(v.span, fmt::format("expected an integer for '{}', got {}", what, describe(v)));
    return std::nullopt;
  }
  if (!v.is_integer) {
    d_.error(v.span, fmt::format("'{}' must be an integer, got {}", what, v.text));
    return std::nullopt;
  }
  if (v.integer < lo || v.integer > hi) {
    std::string bound = v.integer < lo
                            ? (lo == 1   ? std::string("must be positive")
                               : lo == 0 ? std::string("must not be negative")
                                         : fmt::format("must be at least {}", grouped(lo)))
                            : fmt::format("must be at most {}", grouped(hi));
    d_.error(v.span, fmt::format("'{}' {}, got {}", what, bound, v.text));
    return std::nullopt;
  }
  return v.integer;
}

std::optional<double> ValueReader::as_float(const ast::Value& v, std::string_view what, double lo,
                                            double hi, bool lo_inclusive) {
  if (v.kind != ast::Value::Kind::Number) {
    d_.error(v.span, fmt::format("expected a number for '{}', got {}", what, describe(v)));
    return std::nullopt;
  }
  double x = v.number;
  if (x < lo || (!lo_inclusive && x == lo)) {
    std::string bound =
        lo == 0 ? (lo_inclusive ? "must not be negative" : "must be positive")
                : fmt::format("must be {} {}", lo_inclusive ? "at least" : "greater than", lo);
    d_.error(v.span, fmt::format("'{}' {}, got {}", what, bound, v.text));
    return std::nullopt;
  }
  if (x > hi) {
    d_.error(v.span, fmt::format("'{}' must be at most {}, got {}", what, hi, v.text));
    return std::nullopt;
  }
  return x;
}

std::optional<bool> ValueReader::as_bool(const ast::Value& v, std::string_view what) {
  if (v.kind == ast::Value::Kind::Ident && (v.text == "true" || v.text == "false"))
    return v.text == "true";
  d_.error(v.span, fmt::format("expected 'true' or 'false' for '{}', got {}", what, describe(v)));
  return std::nullopt;
}

std::optional<std::string> ValueReader::as_string(const ast::Value& v, std::string_view what) {
  if (v.kind == ast::Value::Kind::String) {
    if (!v.text.empty()) return v.text;
    d_.error(v.span, fmt::format("'{}' must not be empty", what));
    return std::nullopt;
  }
  d_.error(v.span, fmt::format("expected a string for '{}', got {}", what, describe(v)));
  return std::nullopt;
}

std::optional<DType> ValueReader::as_dtype(const ast::Value& v) {
  if (v.kind == ast::Value::Kind::Ident)
    if (std::optional<DType> t = dtype_named(v.text)) return t;
  return as_enum<DType>(v, "dtype", kDTypeNames);
}

std::optional<std::vector<const ast::Value*>> ValueReader::bind(
    const ast::Value& call, const std::vector<std::string_view>& params) {
  std::vector<const ast::Value*> out(params.size(), nullptr);
  std::vector<Span> given(params.size());
  bool ok = true, named_seen = false, positional_reported = false;
  for (size_t i = 0; i < call.args.size(); ++i) {
    const ast::Arg& a = call.args[i];
    size_t slot = i;
    if (!a.name.empty()) {
      named_seen = true;
      auto it = std::find(params.begin(), params.end(), a.name);
      if (it == params.end()) {
        Diagnostic& d =
            d_.error(a.name_span, fmt::format("unknown argument '{}' of '{}'", a.name, call.text));
        std::string m = closest_match(a.name, params);
        if (!m.empty())
          d.message += fmt::format("; did you mean '{}'?", m);
        else
          Diagnostics::note(
              d, fmt::format("'{}' takes {}", call.text,
                             params.empty() ? "no arguments" : quoted_choices(params, " and ")));
        ok = false;
        continue;
      }
      slot = it - params.begin();
    } else if (named_seen) {
      // One error for the first; the rest have no position to bind to either.
      if (!std::exchange(positional_reported, true))
        d_.error(a.value.span,
                 fmt::format("positional argument after a named one in '{}'", call.text));
      ok = false;
      continue;
    } else if (slot >= params.size()) {
      Diagnostic& d = d_.error(a.value.span, fmt::format("too many arguments to '{}'", call.text));
      Diagnostics::note(
          d, fmt::format("'{}' takes {}", call.text,
                         params.empty() ? "no arguments" : quoted_choices(params, " and ")));
      ok = false;
      continue;
    }
    Span here = a.name.empty() ? a.value.span : a.name_span;
    if (out[slot]) {
      Diagnostic& d =
          d_.error(here, fmt::format("argument '{}' of '{}' given twice", params[slot], call.text));
      Diagnostics::note(d, given[slot], "previous value is here");
      ok = false;
      continue;
    }
    out[slot] = &a.value;
    given[slot] = here;
  }
  if (!ok) return std::nullopt;
  return out;
}

bool ValueReader::require(const ast::Value* arg, const ast::Value& call, std::string_view name) {
  if (arg) return true;
  d_.error(call.span, fmt::format("missing argument '{}' of '{}'", name, call.text));
  return false;
}

std::optional<size_t> ValueReader::as_name(const ast::Value& v, std::string_view what,
                                           const std::vector<std::string_view>& names) {
  if (v.kind == ast::Value::Kind::Ident) {
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == v.text) return i;
    Diagnostic& e = d_.error(v.span, fmt::format("unknown {} '{}'", what, v.text));
    std::string m = closest_match(v.text, names);
    if (!m.empty())
      e.message += fmt::format("; did you mean '{}'?", m);
    else
      Diagnostics::note(e, fmt::format("valid values are {}", quoted_choices(names)));
    return std::nullopt;
  }
  Diagnostic& e =
      d_.error(v.span, fmt::format("expected {}, got {}", with_article(what), describe(v)));
  Diagnostics::note(e, fmt::format("valid values are {}", quoted_choices(names)));
  return std::nullopt;
}

std::optional<std::pair<size_t, std::vector<const ast::Value*>>> ValueReader::call_of(
    const ast::Value& v, std::string_view what, const std::vector<std::string_view>& kinds,
    const std::vector<std::vector<std::string_view>>& params) {
  if (v.kind != ast::Value::Kind::Ident && v.kind != ast::Value::Kind::Call) {
    Diagnostic& e =
        d_.error(v.span, fmt::format("expected {}, got {}", with_article(what), describe(v)));
    Diagnostics::note(e, fmt::format("valid values are {}", quoted_choices(kinds)));
    return std::nullopt;
  }
  ast::Value name = v;
  name.kind = ast::Value::Kind::Ident;
  name.span = {v.span.begin, static_cast<uint32_t>(v.span.begin + v.text.size())};
  std::optional<size_t> k = as_name(name, what, kinds);
  if (!k) return std::nullopt;
  if (v.kind == ast::Value::Kind::Ident)
    return std::make_pair(*k, std::vector<const ast::Value*>(params[*k].size()));
  auto args = bind(v, params[*k]);
  if (!args) return std::nullopt;
  return std::make_pair(*k, *args);
}

}  // namespace fsdpgen
