// Diagnostics: collection and Clang-style rendering with carets.
#include "dsl/Diagnostics.h"

#include <algorithm>

#include <fmt/format.h>

namespace fsdpgen {
namespace {

// Longest stretch of a source line shown; longer lines are cut to a window
// around the caret so that output stays proportional to the input.
constexpr uint32_t kMaxShownColumns = 160;

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::Note: return "note";
    case Severity::Warning: return "warning";
    case Severity::Error: return "error";
  }
  return "error";
}

// Appends the source line of `span` and a caret line under it.
void render_snippet(const SourceFile& file, Span span, std::string& out) {
  LineCol lc = file.line_col(span.begin);
  std::string_view line = file.line_text(lc.line);
  uint32_t col0 = std::min<uint32_t>(lc.column - 1, line.size());
  // The underline covers the span's part on the first line, at least one byte.
  uint32_t span_len = span.end > span.begin ? span.end - span.begin : 1;
  uint32_t under_end = std::min<uint32_t>(col0 + span_len, std::max<uint32_t>(line.size(), col0 + 1));
  uint32_t from = 0;
  if (line.size() > kMaxShownColumns && col0 > kMaxShownColumns / 2) from = col0 - kMaxShownColumns / 2;
  uint32_t to = std::min<uint32_t>(line.size(), from + kMaxShownColumns);
  std::string shown(line.substr(from, to - from));
  std::string caret;
  for (uint32_t i = from; i < col0; ++i) caret += (i < line.size() && line[i] == '\t') ? '\t' : ' ';
  caret += '^';
  for (uint32_t i = col0 + 1; i < under_end && i < to; ++i) caret += '~';
  out += (from > 0 ? "..." : "") + shown + (to < line.size() ? "..." : "") + "\n";
  out += (from > 0 ? "   " : "") + caret + "\n";
}

void render_one(const SourceFile& file, Severity sev, Span span, const std::string& msg, std::string& out) {
  LineCol lc = file.line_col(span.begin);
  out += fmt::format("{}:{}:{}: {}: {}\n", file.name(), lc.line, lc.column, severity_name(sev), msg);
  render_snippet(file, span, out);
}

}  // namespace

Diagnostic& Diagnostics::add(Severity sev, Span span, std::string message) {
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

void Diagnostics::note(Diagnostic& d, Span span, std::string message) {
  d.notes.push_back(DiagNote{true, span, std::move(message)});
}

void Diagnostics::note(Diagnostic& d, std::string message) {
  d.notes.push_back(DiagNote{false, {}, std::move(message)});
}

std::string Diagnostics::render() const {
  std::vector<const Diagnostic*> order;
  for (const Diagnostic& d : diags_) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(),
                   [](const Diagnostic* a, const Diagnostic* b) { return a->span.begin < b->span.begin; });
  std::string out;
  for (const Diagnostic* d : order) {
    render_one(*file_, d->severity, d->span, d->message, out);
    for (const DiagNote& n : d->notes) {
      if (n.has_span)
        render_one(*file_, Severity::Note, n.span, n.message, out);
      else
        out += fmt::format("note: {}\n", n.message);
    }
  }
  if (errors_ > kErrorLimit)
    out += fmt::format("fatal error: too many errors emitted ({} shown), stopping now\n", kErrorLimit);
  auto plural = [](size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); };
  if (errors_ > 0 && warnings_ > 0)
    out += plural(warnings_, "warning") + " and " + plural(errors_, "error") + " generated.\n";
  else if (errors_ > 0)
    out += plural(errors_, "error") + " generated.\n";
  else if (warnings_ > 0)
    out += plural(warnings_, "warning") + " generated.\n";
  return out;
}

}  // namespace fsdpgen
