// The expression language of layer headers (layers/Expr.h): parsing with the
// byte of each error, evaluation, initialisations.
#include <gtest/gtest.h>

#include <cmath>

#include <limits>
#include <tuple>

#include "dsl/layer_reader/Expr.h"

namespace fsdpgen::layers {
namespace {

int64_t value(const char* text, const std::map<std::string, int64_t>& v = {}) {
  ExprError e;
  auto x = parse_expr(text, &e);
  EXPECT_TRUE(x) << text << ": " << e.message << " at " << e.offset;
  std::string error;
  auto r = x->eval(v, &error);
  EXPECT_TRUE(r) << text << ": " << error;
  return r.value_or(-1);
}

TEST(LayerExpr, EvaluatesWithPrecedenceAndParentheses) {
  EXPECT_EQ(value("2 + 3 * 4"), 14);
  EXPECT_EQ(value("(2 + 3) * 4"), 20);
  EXPECT_EQ(value("8 / 2 / 2"), 2);
  EXPECT_EQ(value("-3 + 10"), 7);
  EXPECT_EQ(value("6 * d_model * d_ff", {{"d_model", 4}, {"d_ff", 16}}), 384);
  ExprError e;
  EXPECT_EQ(parse_expr("a * b + a", &e)->names(), (std::vector<std::string>{"a", "b"}));
}

TEST(LayerExpr, ErrorsPointAtTheirByte) {
  for (auto [text, offset, message] :
       {std::tuple{"d_model * (d_ff + 1", 10, "this '(' is not closed"},
        {"d_model +", 9, "expected a number, a hyper-parameter or '(' here"},
        {"2.5 * d", 1, "a number here is a whole number"},
        {"d_model d_ff", 8, "unexpected 'd'; expected an operator"},
        {"a $ b", 2, "unexpected '$'"}}) {
    ExprError e;
    EXPECT_FALSE(parse_expr(text, &e)) << text;
    EXPECT_EQ(e.offset, static_cast<size_t>(offset)) << text;
    EXPECT_NE(e.message.find(message), std::string::npos) << text << ": " << e.message;
  }
  ExprError e;
  std::vector<size_t> starts;
  EXPECT_FALSE(parse_expr_list("d_model, d_ff +", &e, &starts));
  EXPECT_EQ(e.offset, 15u);
  starts.clear();
  auto list = parse_expr_list("d_model, (2 * d_ff)", &e, &starts);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].text, "(2 * d_ff)");
  EXPECT_EQ(starts, (std::vector<size_t>{0, 8}));
}

TEST(LayerExpr, EvaluationErrorsAreNamed) {
  ExprError e;
  std::string error;
  EXPECT_FALSE(parse_expr("a / 0", &e)->eval({{"a", 1}}, &error));
  EXPECT_EQ(error, "1 / 0: division by zero");
  EXPECT_FALSE(parse_expr("a / 3", &e)->eval({{"a", 7}}, &error));
  EXPECT_EQ(error, "7 / 3 is not a whole number");
  EXPECT_FALSE(parse_expr("b", &e)->eval({{"a", 7}}, &error));
  EXPECT_EQ(error, "'b' has no value");
  EXPECT_FALSE(parse_expr("a * a", &e)->eval({{"a", int64_t{1} << 40}}, &error));
  EXPECT_EQ(error, "1099511627776 * 1099511627776 overflows 64 bits");
}

// INT64_MIN / -1 and -INT64_MIN trap or wrap in plain int64 arithmetic: each
// is an error naming the operation, as is every other overflow.
TEST(LayerExpr, EveryOperationIsChecked) {
  const int64_t min = std::numeric_limits<int64_t>::min();
  const int64_t max = std::numeric_limits<int64_t>::max();
  for (auto [text, values, message] :
       {std::tuple{"(-9223372036854775807 - 1) / -1", std::map<std::string, int64_t>{},
                   "-9223372036854775808 / -1 overflows 64 bits"},
        {"a / b", {{"a", min}, {"b", -1}}, "-9223372036854775808 / -1 overflows 64 bits"},
        {"-a", {{"a", min}}, "-(-9223372036854775808) overflows 64 bits"},
        {"a + 1", {{"a", max}}, "9223372036854775807 + 1 overflows 64 bits"},
        {"-2 - a", {{"a", max}}, "-2 - 9223372036854775807 overflows 64 bits"},
        {"a * -2", {{"a", min / 2 - 1}}, "-4611686018427387905 * -2 overflows 64 bits"},
        {"a / (b - b)", {{"a", min}, {"b", 3}}, "-9223372036854775808 / 0: division by zero"}}) {
    ExprError e;
    auto x = parse_expr(text, &e);
    ASSERT_TRUE(x) << text << ": " << e.message;
    std::string error;
    EXPECT_FALSE(x->eval(values, &error)) << text;
    EXPECT_EQ(error, message) << text;
  }
  EXPECT_EQ(value("a / -1", {{"a", min + 1}}), max);
  EXPECT_EQ(value("-a", {{"a", max}}), min + 1);
}

// Nesting is bounded (evaluating and freeing a tree recurse once per level):
// a deep expression is a located error, never a stack overflow.
TEST(LayerExpr, DeepNestingIsAnError) {
  const std::string parens = std::string(100000, '(') + "1" + std::string(100000, ')');
  std::string sum = "1";
  for (int i = 0; i < 100000; ++i)
    sum += " + 1";
  std::string negations(100000, '-');
  negations += "1";
  for (const std::string& text : {parens, sum, negations}) {
    ExprError e;
    EXPECT_FALSE(parse_expr(text, &e)) << text.substr(0, 20);
    EXPECT_NE(e.message.find("nests deeper than 256 levels"), std::string::npos) << e.message;
    EXPECT_LT(e.offset, 3000u) << text.substr(0, 20);
  }
  ExprError e;
  EXPECT_FALSE(parse_expr_list("d, " + parens, &e));
  EXPECT_EQ(e.offset, 3u + 256u);
  EXPECT_EQ(value((std::string(200, '(') + "7" + std::string(200, ')')).c_str()), 7);
}

TEST(LayerExpr, Initialisations) {
  ExprError e;
  EXPECT_EQ(parse_init("ones", &e)->kind, Init::Kind::Ones);
  EXPECT_EQ(parse_init("zeros", &e)->kind, Init::Kind::Zeros);
  EXPECT_DOUBLE_EQ(parse_init("normal(0.02)", &e)->std, 0.02);
  EXPECT_FALSE(parse_init("normal()", &e));
  EXPECT_FALSE(parse_init("normal(-1)", &e));
  EXPECT_EQ(e.offset, 7u);
  EXPECT_FALSE(parse_init("uniform(1)", &e));
  EXPECT_EQ(e.offset, 0u);
}

// STD as an expression over hyper-parameters, evaluated in double when bound.
TEST(LayerExpr, InitialisationExpressions) {
  ExprError e;
  const std::optional<Init> scaled = parse_init("normal(0.02 / sqrt(2 * n_layer))", &e);
  ASSERT_TRUE(scaled) << e.message;
  EXPECT_EQ(scaled->std_text, "0.02 / sqrt(2 * n_layer)");
  EXPECT_EQ(scaled->names, std::vector<std::string>{"n_layer"});
  std::string why;
  EXPECT_EQ(init_std(*scaled, {{"n_layer", 12}}, &why), 0.02 / std::sqrt(24.0));
  EXPECT_FALSE(init_std(*scaled, {}, &why));
  EXPECT_EQ(why, "'n_layer' has no value");
  EXPECT_DOUBLE_EQ(*init_std(*parse_init("normal(1e-3 * (d - 2) / -(-4))", &e), {{"d", 6}}, &why),
                   1e-3);
  const std::optional<Init> bad = parse_init("normal(1 / (n - 3))", &e);
  ASSERT_TRUE(bad);
  EXPECT_FALSE(init_std(*bad, {{"n", 3}}, &why));
  EXPECT_EQ(why, "division by zero");
  EXPECT_FALSE(init_std(*parse_init("normal(sqrt(1 - n))", &e), {{"n", 5}}, &why));
  EXPECT_EQ(why, "the square root of a negative number");
  EXPECT_FALSE(init_std(*parse_init("normal(0.5 - n)", &e), {{"n", 1}}, &why));
  EXPECT_EQ(why, "normal's standard deviation is -0.5, not a finite number of at least 0");
  EXPECT_FALSE(parse_init("normal(0.02 / sqrt(2 * n)", &e));
  EXPECT_FALSE(parse_init("normal(0.02 $ 2)", &e));
  EXPECT_EQ(e.offset, 12u);
  EXPECT_FALSE(
      parse_init("normal(" + std::string(300, '(') + "1" + std::string(300, ')') + ")", &e));
  EXPECT_NE(e.message.find("nests deeper than 256"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace fsdpgen::layers
