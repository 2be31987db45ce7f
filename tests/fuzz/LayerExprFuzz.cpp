// libFuzzer target for custom layers' expressions: the input's first line as
// an expression, a comma-separated list and an initialisation (parse_expr,
// parse_expr_list, parse_init), evaluated with values for its names taken
// from the rest of the input (8 bytes each, little-endian, reused in turn).
// Errors must point inside the text; each listed expression's own text must
// parse to the same names and value; a whole expression must be a list of
// one with that value; a name without a value must be an error, else we abort.
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/layer_reader/Expr.h"
#include "tests/fuzz/Fuzz.h"

namespace {

namespace layers = fsdpgen::layers;
using fuzz::check;

// The names' values, from `bytes`; 1, 2, 3, ... where there are none.
std::map<std::string, int64_t> values_for(const std::vector<std::string>& names,
                                          std::string_view bytes) {
  std::map<std::string, int64_t> values;
  const size_t count = bytes.size() / 8;
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t v = static_cast<int64_t>(i) + 1;
    if (count > 0) std::memcpy(&v, bytes.data() + 8 * (i % count), 8);
    values[names[i]] = v;
  }
  return values;
}

std::optional<int64_t> eval(const layers::Expr& e, const std::map<std::string, int64_t>& values) {
  std::string error;
  const std::optional<int64_t> v = e.eval(values, &error);
  check(v || !error.empty(), "a failed evaluation says why");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view text = input.substr(0, newline);
  const std::string_view bytes =
      newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);

  layers::ExprError error;
  std::vector<size_t> offsets;
  const std::optional<std::vector<layers::Expr>> list =
      layers::parse_expr_list(text, &error, &offsets);
  if (!list) check(error.offset <= text.size() && !error.message.empty(), "an error is located");
  if (list) {
    check(offsets.size() == list->size(), "one offset per listed expression");
    for (size_t i = 0; i < list->size(); ++i) {
      const layers::Expr& e = (*list)[i];
      check(offsets[i] <= text.size(), "an offset is inside the text");
      const std::vector<std::string> names = e.names();
      const std::map<std::string, int64_t> values = values_for(names, bytes);
      const std::optional<layers::Expr> again = layers::parse_expr(e.text, &error);
      check(again.has_value(), "a listed expression's text parses alone");
      check(again->names() == names, "its text has the same names");
      check(eval(*again, values) == eval(e, values), "its text has the same value");
      if (!names.empty()) {
        std::map<std::string, int64_t> missing = values;
        missing.erase(names.back());
        check(!eval(e, missing), "a name without a value is an error");
      }
    }
  }

  const std::optional<layers::Expr> whole = layers::parse_expr(text, &error);
  if (!whole) check(error.offset <= text.size() && !error.message.empty(), "an error is located");
  if (whole) {
    check(list && list->size() == 1, "a whole expression is a list of one");
    const std::map<std::string, int64_t> values = values_for(whole->names(), bytes);
    check(eval(*whole, values) == eval(list->front(), values), "and has its value");
  }

  if (!layers::parse_init(text, &error))
    check(error.offset <= text.size() && !error.message.empty(), "an init error is located");
  return 0;
}
