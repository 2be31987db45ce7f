// Lexer: hand-written scanner over the bytes of a SourceFile.
#include "dsl/Lexer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace fsdpgen {

const char* tok_name(Tok t) {
  switch (t) {
    case Tok::Eof:
      return "end of file";
    case Tok::Ident:
      return "name";
    case Tok::Number:
      return "number";
    case Tok::String:
      return "string";
    case Tok::LBrace:
      return "'{'";
    case Tok::RBrace:
      return "'}'";
    case Tok::LParen:
      return "'('";
    case Tok::RParen:
      return "')'";
    case Tok::LBracket:
      return "'['";
    case Tok::RBracket:
      return "']'";
    case Tok::Comma:
      return "','";
    case Tok::Assign:
      return "'='";
    case Tok::DotDot:
      return "'..'";
    case Tok::Member:
      return "a module path";
    case Tok::Invalid:
      return "invalid character";
  }
  return "token";
}

namespace {

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool digit(char c) {
  return c >= '0' && c <= '9';
}

class Lexer {
 public:
  Lexer(const SourceFile& file, Diagnostics& diags) : src_(file.text()), diags_(diags) {}

  std::vector<Token> run() {
    std::vector<Token> out;
    if (src_.starts_with("\xEF\xBB\xBF"))
      pos_ = 3;  // a UTF-8 byte order mark, as some editors write
    for (;;) {
      skip_space_and_comments();
      Token t = next();
      bool eof = t.kind == Tok::Eof;
      out.push_back(std::move(t));
      if (eof) break;
    }
    return out;
  }

 private:
  char peek(size_t k = 0) const { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; }
  Span span_from(size_t begin) const {
    return {static_cast<uint32_t>(begin), static_cast<uint32_t>(pos_)};
  }

  void skip_space_and_comments() {
    while (pos_ < src_.size()) {
      char c = src_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < src_.size() && src_[pos_] != '\n')
          ++pos_;
      } else {
        break;
      }
    }
  }

  Token simple(Tok kind, size_t len) {
    Token t;
    t.kind = kind;
    t.span = {static_cast<uint32_t>(pos_), static_cast<uint32_t>(pos_ + len)};
    t.text = std::string(src_.substr(pos_, len));
    pos_ += len;
    return t;
  }

  Token next() {
    if (pos_ >= src_.size()) return simple(Tok::Eof, 0);
    char c = src_[pos_];
    switch (c) {
      case '{':
        return simple(Tok::LBrace, 1);
      case '}':
        return simple(Tok::RBrace, 1);
      case '(':
        return simple(Tok::LParen, 1);
      case ')':
        return simple(Tok::RParen, 1);
      case '[':
        return simple(Tok::LBracket, 1);
      case ']':
        return simple(Tok::RBracket, 1);
      case ',':
        return simple(Tok::Comma, 1);
      case '=':
        return simple(Tok::Assign, 1);
      case '"':
        return string_literal();
      default:
        break;
    }
    if (c == '.' && peek(1) == '.') return simple(Tok::DotDot, 2);
    if (c == '.' && pos_ > 0 && digit(src_[pos_ - 1]) && ident_start(peek(1))) return member();
    if (digit(c) || ((c == '-' || c == '+' || c == '.') &&
                     (digit(peek(1)) || (peek(1) == '.' && digit(peek(2))))))
      return number();
    if (ident_start(c)) {
      size_t b = pos_;
      while (pos_ < src_.size() && ident_char(src_[pos_]))
        ++pos_;
      Token t;
      t.kind = Tok::Ident;
      t.span = span_from(b);
      t.text = std::string(src_.substr(b, pos_ - b));
      return t;
    }
    return invalid();
  }

  // '.' after a block index, then a module path of identifiers joined by
  // single dots: ".attn.c_attn" in "block 3.attn.c_attn".
  Token member() {
    size_t b = pos_++;
    while (pos_ < src_.size() &&
           (ident_char(src_[pos_]) ||
            (src_[pos_] == '.' && pos_ + 1 < src_.size() && ident_start(src_[pos_ + 1]))))
      ++pos_;
    Token t;
    t.kind = Tok::Member;
    t.span = span_from(b + 1);  // the path, without the dot
    t.text = std::string(src_.substr(b + 1, pos_ - b - 1));
    return t;
  }

  // The length of the well-formed UTF-8 sequence of two or more bytes at
  // `pos_`, or 0 if there is none.
  size_t utf8_length() const {
    unsigned char c = static_cast<unsigned char>(peek());
    size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (c >= 0xF5) len = 0;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(peek(k)) & 0xC0) != 0x80) return 0;
    return len;
  }

  Token invalid() {
    size_t b = pos_;
    unsigned char c = static_cast<unsigned char>(src_[pos_]);
    std::string msg;
    if (size_t len = utf8_length()) {
      // One caret under one character; name it by its code point.
      uint32_t cp = c & (0x7F >> len);
      for (size_t k = 1; k < len; ++k)
        cp = (cp << 6) | (static_cast<unsigned char>(src_[pos_ + k]) & 0x3F);
      pos_ += len;
      msg = fmt::format(
          "unexpected non-ASCII character U+{:04X}; only comments and strings may contain it", cp);
    } else {
      ++pos_;
      if (c == '.' && ident_char(peek()) && b > 0 && ident_char(src_[b - 1])) {
        // Most likely a path without quotes: data = tokens(train.bin)
        auto path_char = [](char x) { return ident_char(x) || x == '.' || x == '/' || x == '-'; };
        size_t first = b, last = pos_;
        while (first > 0 && path_char(src_[first - 1]))
          --first;
        while (last < src_.size() && path_char(src_[last]))
          ++last;
        msg = fmt::format("unexpected character '.'; a file name is a string: write \"{}\"",
                          src_.substr(first, last - first));
      } else if (c >= 0x20 && c < 0x7F) {
        msg = fmt::format("unexpected character '{}'", static_cast<char>(c));
      } else {
        msg = fmt::format("unexpected byte 0x{:02X}{}", c, c >= 0x80 ? " (not UTF-8 text)" : "");
      }
    }
    diags_.error(span_from(b), msg);
    Token t;
    t.kind = Tok::Invalid;
    t.span = span_from(b);
    t.text = std::string(src_.substr(b, pos_ - b));
    return t;
  }

  Token string_literal() {
    size_t b = pos_++;
    Token t;
    t.kind = Tok::String;
    for (;;) {
      if (pos_ >= src_.size() || src_[pos_] == '\n') {
        diags_.error(span_from(b), "unterminated string");
        t.kind = Tok::Invalid;
        break;
      }
      char c = src_[pos_++];
      if (c == '"') break;
      if (c != '\\') {
        t.str += c;
        continue;
      }
      char e = peek();
      if (e == '"' || e == '\\')
        t.str += e;
      else if (e == 'n')
        t.str += '\n';
      else if (e == 't')
        t.str += '\t';
      else {
        size_t at = pos_ - 1;
        if (e != '\n' && e != '\0') pos_ += std::max<size_t>(1, utf8_length());
        Diagnostic& d = diags_.error(
            {static_cast<uint32_t>(at), static_cast<uint32_t>(pos_)},
            fmt::format("unknown escape sequence '{}' in string", src_.substr(at, pos_ - at)));
        Diagnostics::note(d, "strings accept \\\" \\\\ \\n and \\t; write \\\\ for a backslash");
        continue;
      }
      ++pos_;
    }
    t.span = span_from(b);
    t.text = std::string(src_.substr(b, pos_ - b));
    return t;
  }

  // number = [sign] digits ['.' digits] [('e'|'E') [sign] digits] [suffix]
  Token number() {
    size_t b = pos_;
    std::string clean;  // without '_' separators, for strtod
    if (peek() == '-' || peek() == '+') clean += src_[pos_++];
    bool is_float = false;
    auto digits = [&] {
      size_t n = 0;
      while (digit(peek()) || (peek() == '_' && digit(peek(1)) && n > 0)) {
        if (peek() != '_') clean += peek(), ++n;
        ++pos_;
      }
      return n;
    };
    digits();
    if (peek() == '.' && digit(peek(1))) {
      is_float = true;
      clean += src_[pos_++];
      digits();
    }
    bool bad = false;
    if ((peek() == 'e' || peek() == 'E') &&
        (digit(peek(1)) || ((peek(1) == '-' || peek(1) == '+') && digit(peek(2))))) {
      is_float = true;
      clean += src_[pos_++];
      if (peek() == '-' || peek() == '+') clean += src_[pos_++];
      digits();
    }
    size_t suffix_begin = pos_;
    while (ident_char(peek()))
      ++pos_;
    std::string_view suffix = src_.substr(suffix_begin, pos_ - suffix_begin);
    double scale = 1;
    if (!suffix.empty()) {
      static const struct {
        const char* name;
        double scale;
      } kSuffixes[] = {{"K", 1e3},        {"M", 1e6},           {"G", 1e9},
                       {"B", 1e9},        {"T", 1e12},          {"Ki", 1024.0},
                       {"Mi", 1048576.0}, {"Gi", 1073741824.0}, {"Ti", 1099511627776.0}};
      bool found = false;
      std::string_view same_letters;  // a suffix that differs only in case
      for (const auto& s : kSuffixes) {
        if (suffix == s.name) scale = s.scale, found = true;
        if (std::string_view(s.name).size() == suffix.size() &&
            std::equal(suffix.begin(), suffix.end(), s.name, [](char a, char b) {
              return std::toupper(static_cast<unsigned char>(a)) ==
                     std::toupper(static_cast<unsigned char>(b));
            }))
          same_letters = s.name;
      }
      if (!found) {
        Diagnostic& d =
            diags_.error({static_cast<uint32_t>(suffix_begin), static_cast<uint32_t>(pos_)},
                         fmt::format("invalid suffix '{}' on number", suffix));
        if (!same_letters.empty()) d.message += fmt::format("; did you mean '{}'?", same_letters);
        Diagnostics::note(d,
                          "valid suffixes are K, M, G (or B), T (powers of 1000) and Ki, Mi, Gi, "
                          "Ti (powers of 1024)");
        bad = true;
      }
    }
    Token t;
    t.kind = Tok::Number;
    t.span = span_from(b);
    t.text = std::string(src_.substr(b, pos_ - b));
    double v = std::strtod(clean.c_str(), nullptr) * scale;
    if (!bad && (!std::isfinite(v) || std::fabs(v) > 9.0e18)) {
      diags_.error(t.span, "number is too large");
      bad = true;
    }
    if (bad) {
      // Already reported: the parser skips it instead of reading a made-up value.
      t.kind = Tok::Invalid;
      return t;
    }
    t.number = v;
    if (!is_float && scale == 1) {
      // Exact integer parse: doubles lose precision past 2^53.
      t.integer = std::strtoll(clean.c_str(), nullptr, 10);
      t.is_integer = true;
    } else if (scale != 1 && std::nearbyint(v) == v) {
      t.integer = static_cast<int64_t>(v);  // 1.5K is the integer 1500
      t.is_integer = true;
    }
    return t;
  }

  std::string_view src_;
  Diagnostics& diags_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<Token> lex(const SourceFile& file, Diagnostics& diags) {
  return Lexer(file, diags).run();
}

}  // namespace fsdpgen
