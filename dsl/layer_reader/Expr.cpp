// Expr: a recursive-descent parser and evaluator; see Expr.h.
#include "dsl/layer_reader/Expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fsdpgen::layers {

struct ExprNode {
  enum class Kind { Number, Name, Add, Sub, Mul, Div, Neg };
  Kind kind = Kind::Number;
  int64_t number = 0;
  std::string name;
  std::shared_ptr<const ExprNode> a, b;
  int depth = 1;  // of the tree under it, at most kMaxDepth
};

namespace {

using Node = std::shared_ptr<const ExprNode>;

// The deepest an expression may nest (parentheses, negations, operators in a
// row): evaluating and freeing it recurse once per level.
constexpr int kMaxDepth = 256;

bool name_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}

// What both parsers below share: a position in the expression's text (its
// offset base in the header's line) and the first error met.
class ExprCursor {
 public:
  ExprError error_;

 protected:
  ExprCursor(std::string_view s, size_t base) : s_(s), base_(base) {}
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t'))
      ++pos_;
  }
  void fail(size_t at, std::string message) {
    if (error_.message.empty()) error_ = {base_ + at, std::move(message)};
  }
  // After the whole expression was read: true when no error was met and no
  // text is left (what is left is an error).
  bool ended() {
    skip();
    if (error_.message.empty() && pos_ != s_.size())
      fail(pos_, std::string("unexpected '") + s_[pos_] + "'; expected an operator (+ - * /)");
    return error_.message.empty();
  }

  std::string_view s_;
  size_t base_;
  size_t pos_ = 0;
};

// expr = term { ("+" | "-") term } ; term = unary { ("*" | "/") unary } ;
// unary = "-" unary | primary ; primary = NUMBER | NAME | "(" expr ")"
class Parser : ExprCursor {
 public:
  Parser(std::string_view s, size_t base) : ExprCursor(s, base) {}

  Node parse_all(ExprError* error) {
    Node n = expr();
    if (!ended()) {
      if (error) *error = error_;
      return nullptr;
    }
    return n;
  }

 private:
  // A node over `a` and `b`; nullptr past kMaxDepth, failing at `at`.
  Node make(ExprNode n, size_t at) {
    n.depth = 1 + std::max(n.a ? n.a->depth : 0, n.b ? n.b->depth : 0);
    if (n.depth > kMaxDepth) {
      fail(at, "the expression nests deeper than " + std::to_string(kMaxDepth) + " levels");
      return nullptr;
    }
    return std::make_shared<const ExprNode>(std::move(n));
  }
  // Whether one more level of recursion (a '(' or a '-') at `at` fits.
  bool enter(size_t at) {
    if (nesting_ < kMaxDepth) return true;
    fail(at, "the expression nests deeper than " + std::to_string(kMaxDepth) + " levels");
    return false;
  }

  Node expr() {
    Node n = term();
    for (skip(); n && pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-'); skip()) {
      const size_t at = pos_;
      const bool add = s_[pos_++] == '+';
      Node r = term();
      if (!r) return nullptr;
      n = make({add ? ExprNode::Kind::Add : ExprNode::Kind::Sub, 0, "", n, r}, at);
    }
    return n;
  }
  Node term() {
    Node n = unary();
    for (skip(); n && pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '/'); skip()) {
      const size_t at = pos_;
      const bool mul = s_[pos_++] == '*';
      Node r = unary();
      if (!r) return nullptr;
      n = make({mul ? ExprNode::Kind::Mul : ExprNode::Kind::Div, 0, "", n, r}, at);
    }
    return n;
  }
  Node unary() {
    skip();
    if (pos_ < s_.size() && s_[pos_] == '-') {
      const size_t at = pos_++;
      if (!enter(at)) return nullptr;
      ++nesting_;
      Node a = unary();
      --nesting_;
      return a ? make({ExprNode::Kind::Neg, 0, "", a, nullptr}, at) : nullptr;
    }
    return primary();
  }
  Node primary() {
    skip();
    if (pos_ >= s_.size()) {
      fail(pos_, "expected a number, a hyper-parameter or '(' here");
      return nullptr;
    }
    const char c = s_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t b = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])))
        ++pos_;
      if (pos_ < s_.size() && (name_char(s_[pos_]) || s_[pos_] == '.')) {
        fail(pos_, "a number here is a whole number: no fraction, exponent or suffix");
        return nullptr;
      }
      int64_t v = 0;
      const auto r = std::from_chars(s_.data() + b, s_.data() + pos_, v);
      if (r.ec != std::errc()) {
        fail(b, "number out of range");
        return nullptr;
      }
      return make({ExprNode::Kind::Number, v, "", nullptr, nullptr}, b);
    }
    if (name_start(c)) {
      const size_t b = pos_;
      while (pos_ < s_.size() && name_char(s_[pos_]))
        ++pos_;
      return make({ExprNode::Kind::Name, 0, std::string(s_.substr(b, pos_ - b)), nullptr, nullptr},
                  b);
    }
    if (c == '(') {
      const size_t open = pos_++;
      if (!enter(open)) return nullptr;
      ++nesting_;
      Node n = expr();
      --nesting_;
      skip();
      if (!n) return nullptr;
      if (pos_ >= s_.size() || s_[pos_] != ')') {
        fail(open, "this '(' is not closed");
        return nullptr;
      }
      ++pos_;
      return n;
    }
    fail(pos_, std::string("unexpected '") + c + "'; expected a number, a hyper-parameter or '('");
    return nullptr;
  }

  int nesting_ = 0;  // '(' and '-' being parsed
};

void collect(const ExprNode* n, std::vector<std::string>& out) {
  if (!n) return;
  if (n->kind == ExprNode::Kind::Name) {
    for (const std::string& x : out)
      if (x == n->name) return;
    out.push_back(n->name);
  }
  collect(n->a.get(), out);
  collect(n->b.get(), out);
}

// "A OP B overflows 64 bits", with the operands' values.
std::string overflows(int64_t a, const char* op, int64_t b) {
  return std::to_string(a) + " " + op + " " + std::to_string(b) + " overflows 64 bits";
}

// Every operation checked: a sum, difference, product, quotient or negation
// outside int64 is an error, never a wrapped value or a trap.
std::optional<int64_t> evaluate(const ExprNode* n, const std::map<std::string, int64_t>& values,
                                std::string* error) {
  auto fail = [&](std::string m) -> std::optional<int64_t> {
    if (error) *error = std::move(m);
    return std::nullopt;
  };
  switch (n->kind) {
    case ExprNode::Kind::Number:
      return n->number;
    case ExprNode::Kind::Name: {
      auto it = values.find(n->name);
      if (it == values.end()) return fail("'" + n->name + "' has no value");
      return it->second;
    }
    case ExprNode::Kind::Neg: {
      auto a = evaluate(n->a.get(), values, error);
      if (!a) return a;
      int64_t r = 0;
      if (__builtin_sub_overflow(int64_t{0}, *a, &r))
        return fail("-(" + std::to_string(*a) + ") overflows 64 bits");
      return r;
    }
    default:
      break;
  }
  auto a = evaluate(n->a.get(), values, error);
  if (!a) return std::nullopt;
  auto b = evaluate(n->b.get(), values, error);
  if (!b) return std::nullopt;
  int64_t r = 0;
  switch (n->kind) {
    case ExprNode::Kind::Add:
      if (__builtin_add_overflow(*a, *b, &r)) return fail(overflows(*a, "+", *b));
      return r;
    case ExprNode::Kind::Sub:
      if (__builtin_sub_overflow(*a, *b, &r)) return fail(overflows(*a, "-", *b));
      return r;
    case ExprNode::Kind::Mul:
      if (__builtin_mul_overflow(*a, *b, &r)) return fail(overflows(*a, "*", *b));
      return r;
    case ExprNode::Kind::Div:
      if (*b == 0) return fail(std::to_string(*a) + " / 0: division by zero");
      if (*b == -1 && *a == std::numeric_limits<int64_t>::min())
        return fail(overflows(*a, "/", *b));
      if (*a % *b != 0)
        return fail(std::to_string(*a) + " / " + std::to_string(*b) + " is not a whole number");
      return *a / *b;
    default:
      return fail("bad expression");
  }
}

}  // namespace

std::vector<std::string> Expr::names() const {
  std::vector<std::string> out;
  collect(root.get(), out);
  return out;
}

std::optional<int64_t> Expr::eval(const std::map<std::string, int64_t>& values,
                                  std::string* error) const {
  return evaluate(root.get(), values, error);
}

std::optional<Expr> parse_expr(std::string_view text, ExprError* error) {
  Parser p(text, 0);
  Node n = p.parse_all(error);
  if (!n) return std::nullopt;
  return Expr{std::string(text), n};
}

std::optional<std::vector<Expr>> parse_expr_list(std::string_view text, ExprError* error,
                                                 std::vector<size_t>* offsets) {
  std::vector<Expr> out;
  size_t begin = 0;
  int depth = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '(') ++depth;
    if (i < text.size() && text[i] == ')') --depth;
    if (i < text.size() && !(text[i] == ',' && depth == 0)) continue;
    Parser p(text.substr(begin, i - begin), begin);
    Node n = p.parse_all(error);
    if (!n) return std::nullopt;
    std::string_view part = text.substr(begin, i - begin);
    const size_t lead = part.find_first_not_of(" \t");
    part = lead == std::string_view::npos ? std::string_view() : part.substr(lead);
    part = part.substr(0, part.find_last_not_of(" \t") + 1);
    out.push_back({std::string(part), n});
    if (offsets) offsets->push_back(begin);
    begin = i + 1;
  }
  return out;
}

namespace {

// The standard deviation's expression, parsed and (with `values`) evaluated
// in one pass:
// real = rterm { ("+" | "-") rterm } ; rterm = runary { ("*" | "/") runary } ;
// runary = "-" runary | rprimary ;
// rprimary = NUMBER | NAME | "sqrt" "(" real ")" | "(" real ")"
class RealParser : public ExprCursor {
 public:
  RealParser(std::string_view s, size_t base, const std::map<std::string, int64_t>* values)
      : ExprCursor(s, base), values_(values) {}

  // The value (0 when only parsing); nullopt with error_ set.
  std::optional<double> all() {
    const double v = real();
    if (!ended()) return std::nullopt;
    return v;
  }
  std::vector<std::string> names_;

 private:
  bool enter(size_t at) {
    if (++depth_ <= kMaxDepth) return true;
    fail(at, "the expression nests deeper than " + std::to_string(kMaxDepth) + " levels");
    return false;
  }
  double real() {
    double v = rterm();
    for (skip(); error_.message.empty() && pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-');
         skip()) {
      const char op = s_[pos_++];
      const double w = rterm();
      v = op == '+' ? v + w : v - w;
    }
    return v;
  }
  double rterm() {
    double v = runary();
    for (skip(); error_.message.empty() && pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '/');
         skip()) {
      const size_t at = pos_;
      const char op = s_[pos_++];
      const double w = runary();
      if (op == '/' && values_ && w == 0 && error_.message.empty()) fail(at, "division by zero");
      v = op == '*' ? v * w : (w == 0 ? 0 : v / w);
    }
    return v;
  }
  double runary() {
    skip();
    if (pos_ < s_.size() && s_[pos_] == '-') {
      if (!enter(pos_)) return 0;
      ++pos_;
      const double v = -runary();
      --depth_;
      return v;
    }
    return rprimary();
  }
  double rprimary() {
    skip();
    if (pos_ >= s_.size()) {
      fail(pos_, "expected a number, a name, sqrt( or '('");
      return 0;
    }
    const size_t at = pos_;
    if (s_[pos_] == '(' || s_.substr(pos_, 5) == "sqrt(") {
      const bool root = s_[pos_] != '(';
      if (!enter(at)) return 0;
      pos_ += root ? 5 : 1;
      double v = real();
      skip();
      if (pos_ >= s_.size() || s_[pos_] != ')') {
        fail(pos_, "expected ')'");
        return 0;
      }
      ++pos_;
      --depth_;
      if (root) {
        if (values_ && v < 0 && error_.message.empty())
          fail(at, "the square root of a negative number");
        v = v < 0 ? 0 : std::sqrt(v);
      }
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.') {
      const std::string rest(s_.substr(pos_));
      char* end = nullptr;
      const double v = std::strtod(rest.c_str(), &end);
      if (end == rest.c_str() || !std::isfinite(v)) {
        fail(at, "not a finite number");
        return 0;
      }
      pos_ += static_cast<size_t>(end - rest.c_str());
      return v;
    }
    if (name_start(s_[pos_])) {
      size_t e = pos_;
      while (e < s_.size() && name_char(s_[e]))
        ++e;
      const std::string name(s_.substr(pos_, e - pos_));
      pos_ = e;
      if (std::find(names_.begin(), names_.end(), name) == names_.end()) names_.push_back(name);
      if (!values_) return 0;
      const auto it = values_->find(name);
      if (it == values_->end()) {
        fail(at, "'" + name + "' has no value");
        return 0;
      }
      return static_cast<double>(it->second);
    }
    fail(at, std::string("unexpected '") + s_[pos_] + "'; expected a number, a name, sqrt( or '('");
    return 0;
  }

  const std::map<std::string, int64_t>* values_;
  int depth_ = 0;
};

}  // namespace

std::optional<Init> parse_init(std::string_view text, ExprError* error) {
  auto fail = [&](size_t at, std::string m) -> std::optional<Init> {
    if (error) *error = {at, std::move(m)};
    return std::nullopt;
  };
  if (text == "ones") return Init{Init::Kind::Ones, 0, "", {}};
  if (text == "zeros") return Init{Init::Kind::Zeros, 0, "", {}};
  const std::string_view prefix = "normal(";
  if (text.substr(0, prefix.size()) != prefix || text.empty() || text.back() != ')')
    return fail(0, "an initialisation is 'normal(STD)', 'ones' or 'zeros'");
  const std::string_view inner = text.substr(prefix.size(), text.size() - prefix.size() - 1);
  RealParser syntax(inner, prefix.size(), nullptr);
  if (!syntax.all()) {
    if (error) *error = syntax.error_;
    return std::nullopt;
  }
  Init init{Init::Kind::Normal, 0, std::string(inner), syntax.names_};
  if (init.names.empty()) {  // a constant: its value now
    std::string why;
    const std::optional<double> v = init_std(init, {}, &why);
    if (!v) return fail(prefix.size(), why);
    init.std = *v;
  }
  return init;
}

std::optional<double> init_std(const Init& init, const std::map<std::string, int64_t>& values,
                               std::string* error) {
  if (init.kind != Init::Kind::Normal) return 0.0;
  RealParser p(init.std_text, 0, &values);
  const std::optional<double> v = p.all();
  if (!v) {
    if (error) *error = p.error_.message;
    return std::nullopt;
  }
  if (!(*v >= 0) || !std::isfinite(*v)) {
    if (error) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", *v);
      *error = std::string("normal's standard deviation is ") + value +
               ", not a finite number of at least 0";
    }
    return std::nullopt;
  }
  return v;
}

}  // namespace fsdpgen::layers
