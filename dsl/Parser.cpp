// Parser: one function per grammar production (the production is in the
// comment above it), with got/want helpers in the style of Go's syntax package.
#include "dsl/Parser.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "dsl/Lexer.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

// Deeper nesting of values or blocks than this is an error, so that no input
// can exhaust the stack.
constexpr int kMaxDepth = 32;

const std::vector<std::string_view> kSections = {"model", "layers", "units", "parallel", "train"};
const std::vector<std::string_view> kUnitItems = {"each", "group", "min_params", "unit"};
const std::vector<std::string_view> kLayers = {"embed", "final_norm", "head", "block"};

class Parser {
 public:
  Parser(const SourceFile& file, Diagnostics& diags)
      : text_(file.text()), diags_(diags), toks_(lex(file, diags)) {}

  // file = { section } EOF
  ast::File file() {
    ast::File f;
    while (!at(Tok::Eof)) {
      if (!at(Tok::Ident)) {
        unexpected("a section ('model', 'units', 'parallel' or 'train')");
        skip_to_section();
        continue;
      }
      section(f);
    }
    return f;
  }

 private:
  const Token& tok() const { return toks_[pos_]; }
  const Token& peek_tok(size_t k) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool at(Tok k) const { return tok().kind == k; }
  bool at_word(std::string_view w) const { return at(Tok::Ident) && tok().text == w; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  // got: consumes the token if it is of kind k.
  bool got(Tok k) {
    if (!at(k)) return false;
    advance();
    return true;
  }
  // want: consumes a token of kind k or reports "unexpected X, expected Y".
  bool want(Tok k, std::string_view context = {}) {
    if (got(k)) return true;
    unexpected(tok_name(k), context);
    return false;
  }

  // want_close: the closer of a comma-separated list, after an item.
  bool want_close(Tok close, std::string_view context) {
    if (got(close)) return true;
    unexpected(fmt::format("',' or {}", tok_name(close)), context);
    return false;
  }

  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::Ident:
        return fmt::format("name '{}'", t.text);
      case Tok::Number:
        return fmt::format("number {}", t.text);
      case Tok::String:
        return "string " + t.text;
      default:
        return tok_name(t.kind);
    }
  }

  void unexpected(std::string_view expected, std::string_view context = {}) {
    if (at(Tok::Invalid)) return;  // the lexer already reported it
    std::string msg = fmt::format("unexpected {}", describe(tok()));
    if (!context.empty()) msg += fmt::format(" {}", context);
    msg += fmt::format(", expected {}", expected);
    diags_.error(tok().span, msg);
  }

  // Skips to the next token that can start a section at the top level.
  void skip_to_section() {
    int depth = 0;
    while (!at(Tok::Eof)) {
      if (at(Tok::LBrace)) ++depth;
      if (at(Tok::RBrace) && --depth <= 0) {
        advance();
        if (depth < 0) depth = 0;
        continue;
      }
      if (depth == 0 && at(Tok::Ident) && peek_tok(1).kind == Tok::LBrace) return;
      if (depth == 0 && at(Tok::Ident) && peek_tok(1).kind == Tok::Ident &&
          peek_tok(2).kind == Tok::LBrace)
        return;
      advance();
    }
  }

  // Skips to something that can start an entry (a name followed by '=', '{'
  // or '(', or by a number or string: a key missing its '='), or to the '}'
  // that may close the enclosing block. Inside a '(' or '[' that the broken
  // entry left open, only such a name at the start of a line counts, so that
  // the rest of a broken value is not taken for entries.
  void sync_entry() {
    while (!at(Tok::Eof) && !at(Tok::RBrace)) {
      if (at(Tok::Ident) && (open_groups_ == 0 || starts_line())) {
        Tok n = peek_tok(1).kind;
        if (n == Tok::Assign || n == Tok::LBrace || n == Tok::LParen || n == Tok::Number ||
            n == Tok::String)
          break;
      }
      if (at(Tok::LParen) || at(Tok::LBracket)) ++open_groups_;
      if ((at(Tok::RParen) || at(Tok::RBracket)) && open_groups_ > 0) --open_groups_;
      advance();
    }
    open_groups_ = 0;
  }

  // True when the current token is the first on its line.
  bool starts_line() const {
    uint32_t prev_end = pos_ > 0 ? toks_[pos_ - 1].span.end : 0;
    return text_.substr(prev_end, tok().span.begin - prev_end).find('\n') != std::string_view::npos;
  }

  // section = "model" IDENT "{" { entry } "}" | "units" "{" { units_item } "}"
  //         | ("layers" | "parallel" | "train") "{" { entry } "}"
  void section(ast::File& f) {
    ast::Section s;
    s.kind = tok().text;
    s.kind_span = tok().span;
    bool known = std::find(kSections.begin(), kSections.end(), s.kind) != kSections.end();
    if (!known) {
      Diagnostic& d = diags_.error(tok().span, fmt::format("unknown section '{}'", s.kind));
      std::string m = closest_match(s.kind, kSections);
      if (!m.empty())
        d.message += fmt::format("; did you mean '{}'?", m);
      else
        Diagnostics::note(d, "sections are " + quoted_choices(kSections, " and "));
      advance();
      skip_to_section();
      return;
    }
    advance();
    if (s.kind == "model") {
      if (at(Tok::Ident)) {
        s.name = tok().text;
        s.name_span = tok().span;
        advance();
      } else if (at(Tok::LBrace)) {
        diags_.error(tok().span, "expected a model name after 'model' (e.g. 'model tiny {')");
      } else {
        unexpected("a model name", "after 'model'");
      }
    }
    Span open = tok().span;
    if (!want(Tok::LBrace, fmt::format("after '{}'", s.kind))) {
      skip_to_section();
      return;
    }
    if (s.kind == "units") {
      while (!at(Tok::RBrace) && !at(Tok::Eof))
        units_item(s);
    } else {
      while (!at(Tok::RBrace) && !at(Tok::Eof))
        entry(s.entries, 1);
    }
    close_brace(open, s.kind + " section");
    s.span = Span::join(s.kind_span, toks_[pos_ > 0 ? pos_ - 1 : 0].span);
    f.sections.push_back(std::move(s));
  }

  void close_brace(Span open, const std::string& what) {
    if (got(Tok::RBrace)) return;
    // At the end of the file every enclosing block is unclosed too; the
    // innermost one is enough to report.
    if (at(Tok::Eof) && std::exchange(eof_brace_reported_, true)) return;
    Diagnostic& d = diags_.error(tok().span, fmt::format("expected '}}' to close the {}", what));
    Diagnostics::note(d, open, "to match this '{'");
  }

  // entry = IDENT "=" value | IDENT "{" { entry } "}" | IDENT "(" [ arg { "," arg } ] ")"
  void entry(std::vector<ast::Entry>& out, int depth) {
    if (!at(Tok::Ident)) {
      unexpected("a key or '}'");
      advance();
      sync_entry();
      return;
    }
    ast::Entry e;
    e.key = tok().text;
    e.key_span = tok().span;
    advance();
    // After an error the entry is kept as Kind::Error, so that the checker
    // neither reports its key missing nor checks other keys against a guess.
    auto broken = [&] {
      e.kind = ast::Entry::Kind::Error;
      e.span = e.key_span;
      out.push_back(std::move(e));
      sync_entry();
    };
    if (got(Tok::Assign)) {
      e.kind = ast::Entry::Kind::Assign;
      // 'world =' with the value forgotten: the next entry's key follows.
      if (at(Tok::Ident) && (peek_tok(1).kind == Tok::Assign || peek_tok(1).kind == Tok::LBrace)) {
        diags_.error(toks_[pos_ - 1].span, fmt::format("expected a value after '{} ='", e.key));
        return broken();
      }
      // A bad token right after the value was most likely meant to be part of it.
      if (!value(e.value, depth) || at(Tok::Invalid)) return broken();
    } else if (at(Tok::LBrace)) {
      e.kind = ast::Entry::Kind::Block;
      Span open = tok().span;
      advance();
      if (depth >= kMaxDepth) {
        diags_.error(open, "blocks are nested too deeply");
        skip_block();
        return broken();
      }
      while (!at(Tok::RBrace) && !at(Tok::Eof))
        entry(e.entries, depth + 1);
      close_brace(open, fmt::format("'{}' block", e.key));
    } else if (at(Tok::LParen)) {
      e.kind = ast::Entry::Kind::Call;
      e.value.kind = ast::Value::Kind::Call;
      e.value.text = e.key;
      if (!call_args(e.value, depth) || at(Tok::Invalid)) return broken();
    } else {
      // 'width 128': the value is there, the '=' is not.
      bool value_next = at(Tok::Number) || at(Tok::String) || at(Tok::LBracket);
      unexpected(value_next ? "'='" : "'=', '{' or '('", fmt::format("after '{}'", e.key));
      return broken();
    }
    e.span = Span::join(e.key_span, toks_[pos_ - 1].span);
    if (e.kind != ast::Entry::Kind::Block)
      e.value.span = e.kind == ast::Entry::Kind::Call ? e.span : e.value.span;
    out.push_back(std::move(e));
  }

  // Skips the rest of a block whose '{' was just consumed, through its '}'.
  void skip_block() {
    for (int open = 1; open > 0 && !at(Tok::Eof); advance()) {
      if (at(Tok::LBrace)) ++open;
      if (at(Tok::RBrace)) --open;
    }
  }

  // value = NUMBER [ ".." NUMBER ] | STRING | IDENT [ "(" args ")" ]
  //       | "(" value { "," value } [ "," ] ")" | "[" [ value { "," value } [ "," ] ] "]"
  bool value(ast::Value& v, int depth) {
    if (depth >= kMaxDepth) {
      diags_.error(tok().span, "values are nested too deeply");
      return false;
    }
    v.span = tok().span;
    switch (tok().kind) {
      case Tok::Number: {
        v.kind = ast::Value::Kind::Number;
        number_into(v);
        if (at(Tok::DotDot)) {
          ast::Value low = std::move(v);
          v = ast::Value{};
          v.kind = ast::Value::Kind::Range;
          advance();
          ast::Value high;
          high.span = tok().span;
          if (!at(Tok::Number)) {
            unexpected("a number", "after '..'");
            return false;
          }
          number_into(high);
          v.span = Span::join(low.span, high.span);
          v.items.push_back(std::move(low));
          v.items.push_back(std::move(high));
        }
        return true;
      }
      case Tok::String:
        v.kind = ast::Value::Kind::String;
        v.text = tok().str;
        advance();
        return true;
      case Tok::Ident:
        v.kind = ast::Value::Kind::Ident;
        v.text = tok().text;
        advance();
        if (at(Tok::LParen)) {
          v.kind = ast::Value::Kind::Call;
          if (!call_args(v, depth)) return false;
          v.span = Span::join(v.span, toks_[pos_ - 1].span);
        }
        return true;
      case Tok::LParen:
      case Tok::LBracket: {
        bool tuple = at(Tok::LParen);
        v.kind = tuple ? ast::Value::Kind::Tuple : ast::Value::Kind::List;
        Tok close = tuple ? Tok::RParen : Tok::RBracket;
        advance();
        ++open_groups_;
        while (!at(close)) {
          ast::Value item;
          if (!value(item, depth + 1)) return false;
          v.items.push_back(std::move(item));
          if (!got(Tok::Comma)) break;
        }
        if (!want_close(close, tuple ? "in tuple" : "in list")) return false;
        --open_groups_;
        if (tuple && v.items.empty()) {
          diags_.error(Span::join(v.span, toks_[pos_ - 1].span), "empty tuple");
          return false;
        }
        v.span = Span::join(v.span, toks_[pos_ - 1].span);
        return true;
      }
      default:
        unexpected("a value");
        return false;
    }
  }

  void number_into(ast::Value& v) {
    v.kind = ast::Value::Kind::Number;
    v.span = tok().span;
    v.text = tok().text;
    v.number = tok().number;
    v.integer = tok().integer;
    v.is_integer = tok().is_integer;
    advance();
  }

  // args = "(" [ arg { "," arg } [ "," ] ] ")"     arg = [ IDENT "=" ] value
  bool call_args(ast::Value& call, int depth) {
    if (!want(Tok::LParen)) return false;
    ++open_groups_;
    while (!at(Tok::RParen)) {
      ast::Arg a;
      if (at(Tok::Ident) && peek_tok(1).kind == Tok::Assign) {
        a.name = tok().text;
        a.name_span = tok().span;
        advance();
        advance();
      }
      if (!value(a.value, depth + 1)) return false;
      call.args.push_back(std::move(a));
      if (!got(Tok::Comma)) break;
    }
    if (!want_close(Tok::RParen, fmt::format("in arguments of '{}'", call.text))) return false;
    --open_groups_;
    return true;
  }

  // units_item = "each" ("block" | "linear") | "group" NUMBER [ "blocks" ] | "min_params" NUMBER
  //            | "unit" [ IDENT ] "[" layer { "," layer } [ "," ] "]"
  void units_item(ast::Section& s) {
    ast::UnitItem u;
    u.span = tok().span;
    if (!at(Tok::Ident)) {
      unexpected("'each', 'group', 'min_params', 'unit' or '}'");
      advance();
      sync_units();
      return;
    }
    std::string word = tok().text;
    advance();
    if (word == "each") {
      u.kind = ast::UnitItem::Kind::Each;
      if (at_word("linear")) {
        u.kind = ast::UnitItem::Kind::EachLinear;
      } else if (!at_word("block")) {
        unexpected("'block' or 'linear'", "after 'each'");
        sync_units();
        return;
      }
      advance();
    } else if (word == "group" || word == "min_params") {
      u.kind = word == "group" ? ast::UnitItem::Kind::Group : ast::UnitItem::Kind::MinParams;
      if (!at(Tok::Number)) {
        unexpected("a number", fmt::format("after '{}'", word));
        sync_units();
        return;
      }
      number_into(u.count);
      if (word == "group" && (at_word("blocks") || at_word("block"))) advance();
    } else if (word == "unit") {
      u.kind = ast::UnitItem::Kind::Explicit;
      if (at(Tok::Ident)) {
        u.name = tok().text;
        u.name_span = tok().span;
        advance();
      }
      if (!want(Tok::LBracket, "in unit, a list of layers such as [block 0..3]") ||
          !layer_list(u)) {
        sync_units();
        return;
      }
    } else {
      Diagnostic& d = diags_.error(u.span, fmt::format("unknown units directive '{}'", word));
      std::string m = closest_match(word, kUnitItems);
      if (!m.empty())
        d.message += fmt::format("; did you mean '{}'?", m);
      else
        Diagnostics::note(d, "expected " + quoted_choices(kUnitItems));
      sync_units();
      return;
    }
    u.span = Span::join(u.span, toks_[pos_ - 1].span);
    s.units.push_back(std::move(u));
  }

  // layer = "embed" | "final_norm" | "head" | "block" NUMBER [ ".." NUMBER ] [ MEMBER ]
  bool layer_list(ast::UnitItem& u) {
    while (!at(Tok::RBracket)) {
      if (!at(Tok::Ident)) {
        unexpected("a layer ('embed', 'final_norm', 'head' or 'block N')");
        return false;
      }
      ast::LayerRef l;
      l.span = tok().span;
      std::string w = tok().text;
      if (w == "embed")
        l.kind = ast::LayerRef::Kind::Embed;
      else if (w == "final_norm")
        l.kind = ast::LayerRef::Kind::FinalNorm;
      else if (w == "head")
        l.kind = ast::LayerRef::Kind::Head;
      else if (w == "block" || w == "blocks")
        l.kind = ast::LayerRef::Kind::Block;
      else {
        Diagnostic& d = diags_.error(tok().span, fmt::format("unknown layer '{}'", w));
        std::string m = closest_match(w, kLayers);
        if (!m.empty())
          d.message += fmt::format("; did you mean '{}'?", m);
        else
          Diagnostics::note(
              d, "layers are 'embed', 'final_norm', 'head' and 'block N' or 'block N..M'");
        return false;
      }
      advance();
      if (l.kind == ast::LayerRef::Kind::Block) {
        if (!at(Tok::Number) || !tok().is_integer) {
          unexpected("a block index", "after 'block'");
          return false;
        }
        l.first = l.last = tok().integer;
        advance();
        if (got(Tok::DotDot)) {
          if (!at(Tok::Number) || !tok().is_integer) {
            unexpected("a block index", "after '..'");
            return false;
          }
          l.last = tok().integer;
          advance();
        }
        if (at(Tok::Member)) {
          l.piece = tok().text;
          l.piece_span = tok().span;
          advance();
        }
        l.span = Span::join(l.span, toks_[pos_ - 1].span);
      }
      u.layers.push_back(l);
      if (!got(Tok::Comma)) break;
    }
    return want_close(Tok::RBracket, "in layer list");
  }

  void sync_units() {
    while (!at(Tok::Eof) && !at(Tok::RBrace)) {
      if (at(Tok::Ident) &&
          std::find(kUnitItems.begin(), kUnitItems.end(), tok().text) != kUnitItems.end())
        return;
      advance();
    }
  }

  std::string_view text_;
  Diagnostics& diags_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int open_groups_ = 0;  // '(' and '[' of the current entry not yet closed
  bool eof_brace_reported_ = false;
};

}  // namespace

ast::File parse(const SourceFile& file, Diagnostics& diags) {
  return Parser(file, diags).file();
}

}  // namespace fsdpgen
