// CppText: C++ source text as the generated program spells it: literals,
// designated initializers packed into kColumns, comment lines and wrapped
// statements. Knows nothing of schedules: the rooms of the emitter
// (codegen/emit/EmitContext.h) format with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/Spec.h"

namespace fsdpgen::emit {

// Every line of a generated program fits in this many columns.
constexpr size_t kColumns = 100;

// The shortest literal that reads back as exactly v (fmt's round-trip form:
// 0.9, not 0.90000000000000002), always a floating literal (3.0, not 3).
std::string cpp_double(double v);
// A C++ string literal of s, escaped.
std::string cpp_string(std::string_view s);
// A string as adjacent C++ literals, one line of the string (or a piece of
// one, to fit kColumns) per line of code, each line indented by `indent`.
std::string cpp_string_lines(std::string_view s, const std::string& indent);
// FNV-1a of s: the program's hash of its spec, schedule and memory plan.
uint64_t fnv1a(std::string_view s);

// A dtype as the runtime's enumerator ("dtype_id::bf16") and element type ("bf16").
std::string dtype_enum(DType d);
std::string ctype(DType d);

// A line of code longer than kColumns: its trailing comment goes on the line
// above when that makes the code fit; else it breaks after its last comma
// that fits (outside string literals and the comment), the rest indented by
// `more`, again while the rest is too long. A line with no such comma stays.
std::string wrap_line(const std::string& line, const std::string& more);
// Text as `// ` comment lines within kColumns, broken between words; each
// '\n' in the text starts a new line.
std::string comment_lines(std::string_view text);
// `constexpr int name[] = {...};` wrapped, and a newline; "" for no values.
std::string int_array(const std::string& name, const std::vector<int>& v);

// A designated initializer: `.name = value`, or `.name = {fields}`.
struct Init {
  std::string name, value;
  std::vector<Init> fields = {};
};
// `{.a = 1, .b = {...}, ...}` with its opening brace at column `col`, its
// fields packed into lines within kColumns, continuation lines aligned
// after the brace.
std::string braced(const std::vector<Init>& fields, size_t col);
// `.name = value` at column `col`; a struct that does not fit on the line
// packs its fields into lines of their own.
std::string one_field(const Init& f, size_t col);

}  // namespace fsdpgen::emit
