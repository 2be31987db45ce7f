// The expression language of layer headers (layers/Expr.h): parsing with the
// byte of each error, evaluation, initialisations.
#include <gtest/gtest.h>

#include "layers/Expr.h"

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
  EXPECT_EQ(error, "division by zero");
  EXPECT_FALSE(parse_expr("a / 3", &e)->eval({{"a", 7}}, &error));
  EXPECT_EQ(error, "7 / 3 is not a whole number");
  EXPECT_FALSE(parse_expr("b", &e)->eval({{"a", 7}}, &error));
  EXPECT_EQ(error, "'b' has no value");
  EXPECT_FALSE(parse_expr("a * a", &e)->eval({{"a", int64_t{1} << 40}}, &error));
  EXPECT_EQ(error, "the value overflows 64 bits");
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

}  // namespace
}  // namespace fsdpgen::layers
