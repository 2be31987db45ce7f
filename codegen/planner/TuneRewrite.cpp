// TuneRewrite: the rewrite of a spec file's text to a configuration tune
// chose (rewrite_spec_text, codegen/planner/Tune.h), comments and layout kept.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codegen/planner/Tune.h"
#include "codegen/planner/TuneSpace.h"
#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"
#include "dsl/Frontend.h"
#include "dsl/Parser.h"

namespace fsdpgen {
namespace {

// Spec text edits: byte ranges of the original text replaced, applied back
// to front.
struct Edit {
  uint32_t begin = 0, end = 0;
  std::string text;
};

class Rewriter {
 public:
  Rewriter(const std::string& name, const std::string& text)
      : file_(name, text), diags_(file_), tree_(parse(file_, diags_)), text_(text) {}

  // key = value in a section (inserted before its closing brace when absent).
  void set(std::string_view section, std::string_view key, const std::string& value) {
    ast::Section& sec = section_of(section);
    if (const ast::Entry* e = find(sec.entries, key); e && e->kind == ast::Entry::Kind::Assign) {
      edits_.push_back({e->value.span.begin, e->value.span.end, value});
      return;
    } else if (e) {
      edits_.push_back({e->span.begin, e->span.end, fmt::format("{} = {}", key, value)});
      return;
    }
    insert_line(sec, fmt::format("{} = {}", key, value));
  }

  // key { k = v ... } in a section: the values given set, others kept as written.
  void set_block(std::string_view section, std::string_view key,
                 const std::vector<std::pair<std::string, std::string>>& values) {
    ast::Section& sec = section_of(section);
    const ast::Entry* e = find(sec.entries, key);
    if (!e) {
      std::string body;
      for (const auto& [k, v] : values)
        body += fmt::format("{} = {}  ", k, v);
      insert_line(sec, fmt::format("{} {{ {}}}", key, body));
      return;
    }
    if (e->kind == ast::Entry::Kind::Block) {
      bool all_present = true;
      for (const auto& [k, v] : values)
        all_present = all_present && find(e->entries, k) != nullptr;
      if (all_present) {
        for (const auto& [k, v] : values) {
          const ast::Entry* sub = find(e->entries, k);
          edits_.push_back({sub->value.span.begin, sub->value.span.end, v});
        }
        return;
      }
    }
    // Written another way (offload = cpu), or missing a key: the entry anew,
    // keeping the keys it had that are not set here.
    std::string body;
    if (e->kind == ast::Entry::Kind::Block)
      for (const ast::Entry& sub : e->entries) {
        bool replaced = false;
        for (const auto& [k, v] : values)
          replaced = replaced || sub.key == k;
        if (!replaced) body += std::string(file_.slice(sub.span)) + "  ";
      }
    for (const auto& [k, v] : values)
      body += fmt::format("{} = {}  ", k, v);
    edits_.push_back({e->span.begin, e->span.end, fmt::format("{} {{ {}}}", key, body)});
  }

  // Removes an entry with its line when nothing else is on it.
  void remove(std::string_view section, std::string_view key) {
    ast::Section& sec = section_of(section);
    const ast::Entry* e = find(sec.entries, key);
    if (!e) return;
    uint32_t b = e->span.begin, end = e->span.end;
    while (b > 0 && (text_[b - 1] == ' ' || text_[b - 1] == '\t'))
      --b;
    uint32_t after = end;
    while (after < text_.size() && (text_[after] == ' ' || text_[after] == '\t'))
      ++after;
    if ((b == 0 || text_[b - 1] == '\n') && after < text_.size() &&
        (text_[after] == '\n' || text_[after] == '#')) {
      while (after < text_.size() && text_[after] != '\n')
        ++after;
      edits_.push_back({b, std::min<uint32_t>(after + 1, text_.size()), ""});
    } else {
      edits_.push_back({e->span.begin, e->span.end, ""});
    }
  }

  // The units section's policy line replaced (explicit units stay).
  void set_units(const std::string& policy) {
    for (ast::Section& sec : tree_.sections) {
      if (sec.kind != "units") continue;
      bool done = false;
      for (const ast::UnitItem& item : sec.units) {
        if (item.kind == ast::UnitItem::Kind::Explicit) continue;
        edits_.push_back({item.span.begin, item.span.end, done ? "" : policy});
        done = true;
      }
      if (!done) insert_line(sec, policy);
      return;
    }
    // No units section: one before the parallel section (or at the end).
    uint32_t at = static_cast<uint32_t>(text_.size());
    for (const ast::Section& sec : tree_.sections)
      if (sec.kind == "parallel" || sec.kind == "train") {
        at = sec.span.begin;
        break;
      }
    edits_.push_back({at, at, fmt::format("units {{\n  {}\n}}\n\n", policy)});
  }

  std::string result() {
    std::stable_sort(edits_.begin(), edits_.end(),
                     [](const Edit& a, const Edit& b) { return a.begin > b.begin; });
    std::string out = text_;
    for (const Edit& e : edits_)
      out.replace(e.begin, e.end - e.begin, e.text);
    return out;
  }

 private:
  static const ast::Entry* find(const std::vector<ast::Entry>& entries, std::string_view key) {
    for (const ast::Entry& e : entries)
      if (e.key == key) return &e;
    return nullptr;
  }

  ast::Section& section_of(std::string_view kind) {
    for (ast::Section& s : tree_.sections)
      if (s.kind == kind) return s;
    throw std::runtime_error(fmt::format("the spec has no '{}' section to rewrite", kind));
  }

  // A line before the section's closing brace, indented as its first entry.
  void insert_line(const ast::Section& sec, const std::string& line) {
    std::string indent = "  ";
    if (!sec.entries.empty()) {
      const LineCol lc = file_.line_col(sec.entries.front().span.begin);
      indent.assign(lc.column - 1, ' ');
    }
    uint32_t close = sec.span.end - 1;  // the '}'
    uint32_t line_start = close;
    while (line_start > 0 && (text_[line_start - 1] == ' ' || text_[line_start - 1] == '\t'))
      --line_start;
    if (line_start > 0 && text_[line_start - 1] == '\n')
      edits_.push_back({line_start, line_start, indent + line + "\n"});
    else
      edits_.push_back({close, close, " " + line + " "});
  }

  SourceFile file_;
  Diagnostics diags_;
  ast::File tree_;
  std::string text_;
  std::vector<Edit> edits_;
};

}  // namespace

std::string rewrite_spec_text(const std::string& name, const std::string& text, const Spec& from,
                              const Spec& to) {
  Rewriter w(name, text);
  const ParallelSpec &a = from.parallel, &b = to.parallel;
  if (a.world != b.world) w.set("parallel", "world", std::to_string(b.world));
  if (a.ranks_per_node != b.ranks_per_node)
    w.set("parallel", "ranks_per_node", std::to_string(b.ranks_per_node));
  if (a.sharding != b.sharding) w.set("parallel", "sharding", std::string(to_string(b.sharding)));
  if (is_hybrid(b.sharding) && (!is_hybrid(a.sharding) || a.shard_group != b.shard_group))
    w.set("parallel", "shard_group", std::to_string(b.shard_group));
  if (!is_hybrid(b.sharding) && is_hybrid(a.sharding)) w.remove("parallel", "shard_group");
  if (a.precision.reduce != b.precision.reduce)
    w.set_block("parallel", "precision", {{"reduce", std::string(to_string(b.precision.reduce))}});
  std::vector<std::pair<std::string, std::string>> pf;
  if (a.prefetch.forward != b.prefetch.forward)
    pf.push_back({"forward", b.prefetch.forward ? "true" : "false"});
  if (a.prefetch.backward != b.prefetch.backward)
    pf.push_back({"backward", std::string(to_string(b.prefetch.backward))});
  if (a.prefetch.max_inflight != b.prefetch.max_inflight)
    pf.push_back({"max_inflight", std::to_string(b.prefetch.max_inflight)});
  if (!pf.empty()) w.set_block("parallel", "prefetch", pf);
  if (a.recompute != b.recompute)
    w.set("parallel", "recompute", std::string(to_string(b.recompute)));
  if (a.offload != b.offload || a.offload_activations != b.offload_activations) {
    if (b.offload_activations || a.offload_activations)
      w.set_block("parallel", "offload",
                  {{"params", std::string(to_string(b.offload))},
                   {"activations", b.offload_activations ? "cpu" : "none"}});
    else
      w.set("parallel", "offload", std::string(to_string(b.offload)));
  }
  std::vector<std::pair<std::string, std::string>> acc;
  if (a.accumulate.micro_batches != b.accumulate.micro_batches)
    acc.push_back({"micro_batches", std::to_string(b.accumulate.micro_batches)});
  if (a.accumulate.reduce != b.accumulate.reduce)
    acc.push_back({"reduce", std::string(to_string(b.accumulate.reduce))});
  if (!acc.empty()) w.set_block("parallel", "accumulate", acc);
  if (from.units != to.units) w.set_units(units_text(to.units));
  if (from.train.micro_batch != to.train.micro_batch)
    w.set("train", "micro_batch", std::to_string(to.train.micro_batch));
  std::string out = w.result();
  FrontendResult back = load_spec_text(name, out);
  if (!back.spec || !same_configuration(*back.spec, to))
    throw std::runtime_error(
        fmt::format("the rewritten spec does not read back as the chosen configuration{}",
                    back.spec ? "" : ":\n" + back.diagnostics));
  return out;
}

}  // namespace fsdpgen
