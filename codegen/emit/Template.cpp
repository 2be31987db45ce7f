// Template: the region substituter.
#include "codegen/emit/Template.h"

#include <cctype>
#include <set>

#include <fmt/format.h>

namespace fsdpgen {
namespace {

std::string_view trim(std::string_view s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string_view::npos) return {};
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// "// fsdpgen:begin NAME" -> ("begin", "NAME"); anything else mentioning the
// marker prefix yields ("?", line) so that it is reported.
std::pair<std::string, std::string> marker(std::string_view line) {
  std::string_view t = trim(line);
  if (t.find("fsdpgen:") == std::string_view::npos) return {"", ""};
  for (const char* verb : {"begin", "end"}) {
    std::string prefix = fmt::format("// fsdpgen:{} ", verb);
    if (t.substr(0, prefix.size()) == prefix) {
      std::string_view name = trim(t.substr(prefix.size()));
      bool word = !name.empty();
      for (char ch : name)
        word &= std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
      if (word) return {verb, std::string(name)};
    }
  }
  return {"?", std::string(t)};
}

}  // namespace

std::string fill_template(std::string_view template_name, std::string_view text,
                          const std::map<std::string, std::string>& values) {
  std::string out;
  std::set<std::string> used;
  std::string open;  // region being replaced
  int open_line = 0, line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view line = text.substr(pos, end == std::string_view::npos ? end : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    ++line_no;
    auto [verb, name] = marker(line);
    auto where = [&] { return fmt::format("{}:{}", template_name, line_no); };
    if (verb == "?")
      throw TemplateError(fmt::format("{}: malformed marker line '{}'", where(), name));
    if (verb == "begin") {
      if (!open.empty())
        throw TemplateError(fmt::format("{}: region '{}' begins inside region '{}' (line {})",
                                        where(), name, open, open_line));
      auto v = values.find(name);
      if (v == values.end())
        throw TemplateError(fmt::format("{}: no value for region '{}'", where(), name));
      if (!used.insert(name).second)
        throw TemplateError(fmt::format("{}: region '{}' appears twice", where(), name));
      out += v->second;
      open = name;
      open_line = line_no;
      continue;
    }
    if (verb == "end") {
      if (open != name)
        throw TemplateError(open.empty()
                                ? fmt::format("{}: 'end {}' without a begin", where(), name)
                                : fmt::format("{}: 'end {}' inside region '{}' (line {})", where(),
                                              name, open, open_line));
      open.clear();
      continue;
    }
    if (open.empty()) {
      out += line;
      out += '\n';
    }
  }
  if (!open.empty())
    throw TemplateError(
        fmt::format("{}:{}: region '{}' is never closed", template_name, open_line, open));
  for (const auto& [name, value] : values)
    if (!used.count(name))
      throw TemplateError(
          fmt::format("{}: value '{}' has no region in the template", template_name, name));
  return out;
}

}  // namespace fsdpgen
