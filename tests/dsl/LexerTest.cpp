// Lexer: numbers with suffixes, strings, comments, token spans.
#include "dsl/Lexer.h"

#include <gtest/gtest.h>

namespace fsdpgen {
namespace {

std::vector<Token> lex_ok(const std::string& text) {
  SourceFile f("t.fsdp", text);
  Diagnostics d(f);
  auto toks = lex(f, d);
  EXPECT_FALSE(d.has_errors()) << d.render();
  return toks;
}

Token number(const std::string& text) {
  auto toks = lex_ok(text);
  EXPECT_EQ(toks.size(), 2u);
  EXPECT_EQ(toks[0].kind, Tok::Number) << text;
  return toks[0];
}

TEST(Lexer, IntegersAreExact) {
  Token t = number("9007199254740993");  // 2^53 + 1: not representable as a double
  EXPECT_TRUE(t.is_integer);
  EXPECT_EQ(t.integer, 9007199254740993LL);
}

TEST(Lexer, DecimalAndBinarySuffixes) {
  EXPECT_EQ(number("50K").integer, 50000);
  EXPECT_EQ(number("1.5K").integer, 1500);
  EXPECT_EQ(number("50M").integer, 50000000);
  EXPECT_EQ(number("2B").integer, 2000000000);
  EXPECT_EQ(number("2G").integer, 2000000000);
  EXPECT_EQ(number("1T").integer, 1000000000000);
  EXPECT_EQ(number("4Ki").integer, 4096);
  EXPECT_EQ(number("1Mi").integer, 1048576);
  EXPECT_EQ(number("1Gi").integer, 1073741824);
  EXPECT_TRUE(number("50K").is_integer);
}

TEST(Lexer, RealsAreNotIntegers) {
  Token t = number("1.5e-4");
  EXPECT_FALSE(t.is_integer);
  EXPECT_DOUBLE_EQ(t.number, 1.5e-4);
  EXPECT_FALSE(number("1e3").is_integer);
  EXPECT_FALSE(number("2.0").is_integer);
  EXPECT_DOUBLE_EQ(number("-0.5").number, -0.5);
}

TEST(Lexer, UnderscoreSeparators) {
  EXPECT_EQ(number("124_439_808").integer, 124439808);
}

TEST(Lexer, RangeIsNotADecimalPoint) {
  auto toks = lex_ok("0..3");
  ASSERT_EQ(toks.size(), 4u);
  EXPECT_EQ(toks[0].kind, Tok::Number);
  EXPECT_EQ(toks[1].kind, Tok::DotDot);
  EXPECT_EQ(toks[2].kind, Tok::Number);
  EXPECT_EQ(toks[2].integer, 3);
}

TEST(Lexer, StringsDecodeEscapes) {
  auto toks = lex_ok(R"("a\"b\\c\n")");
  ASSERT_EQ(toks[0].kind, Tok::String);
  EXPECT_EQ(toks[0].str, "a\"b\\c\n");
}

TEST(Lexer, CommentsAndSpans) {
  auto toks = lex_ok("# comment\n  world = 2 # trailing\n");
  ASSERT_EQ(toks.size(), 4u);
  EXPECT_EQ(toks[0].text, "world");
  EXPECT_EQ(toks[0].span.begin, 12u);
  EXPECT_EQ(toks[0].span.end, 17u);
  EXPECT_EQ(toks[3].kind, Tok::Eof);
}

TEST(Lexer, ErrorsAreLocated) {
  SourceFile f("t.fsdp", "a = 3x\nb = \"open\n");
  Diagnostics d(f);
  lex(f, d);
  EXPECT_EQ(d.error_count(), 2u);
  std::string out = d.render();
  EXPECT_NE(out.find("t.fsdp:1:6: error: invalid suffix 'x' on number"), std::string::npos) << out;
  EXPECT_NE(out.find("t.fsdp:2:5: error: unterminated string"), std::string::npos) << out;
  EXPECT_NE(out.find("2 errors generated."), std::string::npos) << out;
}

}  // namespace
}  // namespace fsdpgen
