// Diagnostics: collection and Clang-style rendering with carets.
#include "dsl/Diagnostics.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace fsdpgen {
namespace {

// Longest stretch of a source line shown; longer lines are cut to a window
// around the caret so that output stays proportional to the input.
constexpr uint32_t kMaxShownColumns = 160;

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Note:
      return "note";
    case Severity::Warning:
      return "warning";
    case Severity::Error:
      return "error";
  }
  return "error";
}

// Bytes of the well-formed UTF-8 character at line[i] (1 for ASCII), or 0
// for a byte that starts none.
uint32_t utf8_length(std::string_view line, uint32_t i) {
  unsigned char c = static_cast<unsigned char>(line[i]);
  uint32_t len = c < 0x80                 ? 1
                 : c >= 0xC2 && c <= 0xDF ? 2
                 : c >= 0xE0 && c <= 0xEF ? 3
                 : c >= 0xF0 && c <= 0xF4 ? 4
                                          : 0;
  if (i + len > line.size()) return 0;
  for (uint32_t k = 1; k < len; ++k)
    if ((static_cast<unsigned char>(line[i + k]) & 0xC0) != 0x80) return 0;
  return len;
}

// Appends the source line of `span` and a caret line under it. The caret line
// has one column per character shown; control characters and bytes that are
// not UTF-8 are shown as '?', so that no input can garble a terminal.
void render_snippet(const SourceFile& file, Span span, std::string& out) {
  LineCol lc = file.line_col(span.begin);
  std::string_view line = file.line_text(lc.line);
  uint32_t col0 = std::min<uint32_t>(lc.column - 1, line.size());
  // The underline covers the span's part on the first line, at least one byte.
  uint32_t span_len = span.end > span.begin ? span.end - span.begin : 1;
  uint32_t under_end =
      std::min<uint32_t>(col0 + span_len, std::max<uint32_t>(line.size(), col0 + 1));
  uint32_t from = 0;
  if (line.size() > kMaxShownColumns && col0 > kMaxShownColumns / 2)
    from = col0 - kMaxShownColumns / 2;
  while (from > 0 && from < line.size() && (static_cast<unsigned char>(line[from]) & 0xC0) == 0x80)
    --from;
  const bool cut = from > 0;
  if (!cut && lc.line == 1 && line.starts_with("\xEF\xBB\xBF"))
    from = 3;  // a byte order mark shows nothing
  uint32_t to = std::min<uint32_t>(line.size(), from + kMaxShownColumns);
  std::string shown = cut ? "..." : "";
  std::string caret = cut ? "   " : "";
  bool placed = false;
  uint32_t i = from;
  while (i < to) {
    uint32_t len = utf8_length(line, i);
    unsigned char c = static_cast<unsigned char>(line[i]);
    if (len == 0 || (len == 1 && c < 0x20 && c != '\t') || c == 0x7F) {
      shown += '?';
      len = 1;
    } else {
      shown += line.substr(i, len);
    }
    if (i + len <= col0) {
      caret += c == '\t' ? '\t' : ' ';
    } else if (!placed) {
      caret += '^';
      placed = true;
    } else if (i < under_end) {
      caret += '~';
    }
    i += len;
  }
  if (!placed) caret += '^';  // at the end of the line
  if (i < line.size()) shown += "...";
  out += shown + "\n" + caret + "\n";
}

void render_one(const SourceFile& file, Severity sev, Span span, const std::string& msg,
                std::string& out) {
  LineCol lc = file.line_col(span.begin);
  out +=
      fmt::format("{}:{}:{}: {}: {}\n", file.name(), lc.line, lc.column, severity_name(sev), msg);
  render_snippet(file, span, out);
}

// Messages quote names from the input; a pathological one (a megabyte-long
// identifier) is cut so that output stays bounded.
std::string bounded(std::string message) {
  constexpr size_t kMaxMessageBytes = 400;
  if (message.size() <= kMaxMessageBytes) return message;
  size_t cut = kMaxMessageBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80)
    --cut;
  message.resize(cut);
  return message + "...";
}

}  // namespace

Diagnostic& Diagnostics::add(Severity sev, Span span, std::string message) {
  message = bounded(std::move(message));
  if (sev == Severity::Error) ++errors_;
  if (sev == Severity::Warning) ++warnings_;
  if (sev == Severity::Error && errors_ > kErrorLimit) {
    scratch_ = Diagnostic{};
    return scratch_;
  }
  diags_.push_back(Diagnostic{sev, span, std::move(message), {}});
  return diags_.back();
}

Diagnostic& Diagnostics::error(Span span, std::string message) {
  return add(Severity::Error, span, std::move(message));
}

Diagnostic& Diagnostics::warning(Span span, std::string message) {
  return add(Severity::Warning, span, std::move(message));
}

Diagnostic& Diagnostics::remark(Span span, std::string message) {
  return add(Severity::Note, span, std::move(message));
}

void Diagnostics::note(Diagnostic& d, Span span, std::string message) {
  d.notes.push_back(DiagNote{true, span, bounded(std::move(message))});
}

void Diagnostics::note(Diagnostic& d, std::string message) {
  d.notes.push_back(DiagNote{false, {}, bounded(std::move(message))});
}

Span Diagnostics::command_line(std::string flag, std::optional<DiagNote> replaced) {
  command_line_.push_back({std::move(flag), std::move(replaced)});
  return Span{0, 0, static_cast<uint32_t>(command_line_.size())};
}

void Diagnostics::render_at(Severity sev, Span span, const std::string& message,
                            std::string& out) const {
  if (span.command_line == 0) {
    render_one(*file_, sev, span, message, out);
    return;
  }
  out += fmt::format("{}: {}: {}\n", severity_name(sev), command_line_[span.command_line - 1].flag,
                     message);
}

std::string Diagnostics::render() const {
  std::vector<const Diagnostic*> order;
  for (const Diagnostic& d : diags_)
    order.push_back(&d);
  // Command-line values come first, as they do on the command line.
  auto position = [](const Diagnostic* d) {
    return std::pair(d->span.command_line == 0, d->span.begin);
  };
  std::stable_sort(order.begin(), order.end(), [&](const Diagnostic* a, const Diagnostic* b) {
    return position(a) < position(b);
  });
  std::string out;
  for (const Diagnostic* d : order) {
    render_at(d->severity, d->span, d->message, out);
    std::vector<DiagNote> notes = d->notes;
    if (d->span.command_line != 0)
      if (const auto& replaced = command_line_[d->span.command_line - 1].replaced)
        notes.push_back(*replaced);
    for (const DiagNote& n : notes) {
      if (n.has_span)
        render_at(Severity::Note, n.span, n.message, out);
      else
        out += fmt::format("note: {}\n", n.message);
    }
  }
  if (errors_ > kErrorLimit)
    out +=
        fmt::format("fatal error: too many errors emitted ({} shown), stopping now\n", kErrorLimit);
  auto plural = [](size_t n, const char* word) {
    return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
  };
  if (errors_ > 0 && warnings_ > 0)
    out += plural(warnings_, "warning") + " and " + plural(errors_, "error") + " generated.\n";
  else if (errors_ > 0)
    out += plural(errors_, "error") + " generated.\n";
  else if (warnings_ > 0)
    out += plural(warnings_, "warning") + " generated.\n";
  return out;
}

}  // namespace fsdpgen
