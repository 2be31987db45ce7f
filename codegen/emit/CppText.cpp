// CppText: literals, comment lines, wrapped lines and packed initializers.
#include "codegen/emit/CppText.h"

#include <algorithm>

#include <fmt/format.h>

namespace fsdpgen::emit {

std::string cpp_double(double v) {
  std::string out = fmt::format("{}", v);
  if (out.find_first_of(".en") == std::string::npos) out += ".0";
  return out;
}

std::string cpp_string(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20)
          out += fmt::format("\\{:03o}", static_cast<unsigned char>(ch));
        else
          out += ch;
    }
  }
  return out + "\"";
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s)
    h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string dtype_enum(DType d) {
  return d == DType::FP32   ? "dtype_id::fp32"
         : d == DType::BF16 ? "dtype_id::bf16"
                            : "dtype_id::fp16";
}
std::string ctype(DType d) {
  return d == DType::FP32 ? "float" : d == DType::BF16 ? "bf16" : "fp16";
}

namespace {

// Where a line's trailing comment starts (outside string literals), or npos.
size_t trailing_comment(const std::string& line) {
  bool quoted = false;
  for (size_t k = 0; k + 1 < line.size(); ++k) {
    if (line[k] == '"' && (k == 0 || line[k - 1] != '\\')) quoted = !quoted;
    if (!quoted && line[k] == '/' && line[k + 1] == '/') return k;
  }
  return std::string::npos;
}

}  // namespace

std::string wrap_line(const std::string& line, const std::string& more) {
  if (line.size() <= kColumns) return line;
  const std::string indent = line.substr(0, line.find_first_not_of(' '));
  const size_t comment = trailing_comment(line);
  if (comment != std::string::npos && comment > indent.size()) {
    const size_t code_end = line.find_last_not_of(' ', comment - 1) + 1;
    if (code_end <= kColumns)
      return indent + line.substr(comment) + "\n" + line.substr(0, code_end);
  }
  size_t cut = std::string::npos;
  bool quoted = false;
  for (size_t k = 0; k + 1 < line.size() && k < kColumns && k < comment; ++k) {
    if (line[k] == '"' && (k == 0 || line[k - 1] != '\\')) quoted = !quoted;
    if (!quoted && line[k] == ',' && line[k + 1] == ' ') cut = k + 1;
  }
  if (cut == std::string::npos) return line;
  return line.substr(0, cut) + "\n" + wrap_line(indent + more + line.substr(cut + 1), "");
}

std::string comment_lines(std::string_view text) {
  std::string out, line;
  auto flush = [&] {
    out += "//" + line + "\n";
    line.clear();
  };
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find_first_of(" \n", at), text.size());
    const std::string word(text.substr(at, end - at));
    if (!line.empty() && 3 + line.size() + word.size() > kColumns) flush();
    line += " " + word;
    if (end < text.size() && text[end] == '\n') flush();
    at = end + 1;
  }
  if (!line.empty()) flush();
  return out;
}

std::string cpp_string_lines(std::string_view s, const std::string& indent) {
  std::string out;
  const size_t width = kColumns - indent.size() - 2;  // the quotes
  while (!s.empty()) {
    size_t end = s.find('\n');
    end = end == std::string_view::npos ? s.size() : end + 1;
    std::string piece = cpp_string(s.substr(0, end));
    size_t take = end;
    while (piece.size() > width) {  // a long line goes in pieces
      take = std::max<size_t>(1, take * width / piece.size());
      const size_t space = s.substr(0, take).rfind(' ');
      if (space != std::string_view::npos && space > 0) take = space + 1;  // between words
      piece = cpp_string(s.substr(0, take));
    }
    out += (out.empty() ? "" : "\n") + indent + piece;
    s.remove_prefix(take);
  }
  return out.empty() ? indent + "\"\"" : out;
}

std::string int_array(const std::string& name, const std::vector<int>& v) {
  if (v.empty()) return "";
  std::vector<std::string> items;
  for (int x : v)
    items.push_back(std::to_string(x));
  return wrap_line(fmt::format("constexpr int {}[] = {{{}}};", name, fmt::join(items, ", ")),
                   "    ") +
         "\n";
}

namespace {

std::string one_line(const Init& f) {
  if (f.fields.empty()) return fmt::format(".{} = {}", f.name, f.value);
  std::vector<std::string> items;
  for (const Init& g : f.fields)
    items.push_back(one_line(g));
  return fmt::format(".{} = {{{}}}", f.name, fmt::join(items, ", "));
}

// Columns after the last newline of s, for s placed at column `col`.
size_t end_column(const std::string& s, size_t col) {
  const size_t nl = s.rfind('\n');
  return nl == std::string::npos ? col + s.size() : s.size() - nl - 1;
}

// Room kept at the end of a line for the closing braces and comma after a field.
constexpr size_t kCloseRoom = 4;

}  // namespace

std::string braced(const std::vector<Init>& fields, size_t col) {
  std::string out = "{";
  size_t at = col + 1;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string item = one_line(fields[i]) + (i + 1 < fields.size() ? "," : "");
    const size_t start = i == 0 ? at : at + 1;
    if (i > 0 && start + item.size() + kCloseRoom > kColumns) {
      out += "\n" + std::string(col + 1, ' ');
      at = col + 1;
    } else if (i > 0) {
      out += " ";
      at = start;
    }
    const std::string text = one_field(fields[i], at) + (i + 1 < fields.size() ? "," : "");
    out += text;
    at = end_column(text, at);
  }
  return out + "}";
}

std::string one_field(const Init& f, size_t col) {
  const std::string line = one_line(f);
  if (f.fields.empty() || col + line.size() + kCloseRoom <= kColumns) return line;
  const std::string head = fmt::format(".{} = ", f.name);
  return head + braced(f.fields, col + head.size());
}

}  // namespace fsdpgen::emit
