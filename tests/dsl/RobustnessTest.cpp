// Hostile inputs: the front end reports errors and returns, with output
// bounded by the error limit, never crashing or recursing without bound.
#include <gtest/gtest.h>

#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

TEST(Robustness, EmptyAndCommentOnly) {
  EXPECT_NE(load_error("").find("missing 'model' section"), std::string::npos);
  EXPECT_NE(load_error("# nothing\n").find("missing 'model' section"), std::string::npos);
}

TEST(Robustness, DeepNestingIsAnErrorNotACrash) {
  std::string deep = with_model("train { optimizer = " + std::string(100000, '[') + " }");
  EXPECT_NE(load_error(deep).find("nested too deeply"), std::string::npos);
  std::string blocks = with_model("parallel { " + std::string(50000, 'a') + " }");
  load_error(blocks);
  std::string braces;
  for (int i = 0; i < 50000; ++i)
    braces += "a { ";
  EXPECT_NE(load_error(with_model("parallel { " + braces)).find("nested too deeply"),
            std::string::npos);
}

TEST(Robustness, ManyErrorsAreCappedAndCounted) {
  std::string many = with_model("parallel {");
  for (int i = 0; i < 100000; ++i)
    many += " x" + std::to_string(i) + " = 1";
  many += " }";
  std::string out = load_error(many);
  EXPECT_NE(out.find("too many errors emitted"), std::string::npos);
  EXPECT_NE(out.find("100000 errors generated."), std::string::npos);
  EXPECT_LT(out.size(), 50000u);  // 50 diagnostics, not 100000
}

TEST(Robustness, LongLinesAreShownAroundTheCaret) {
  std::string line =
      with_model("parallel { sharding = full_shard " + std::string(100000, ' ') + "world = -1 }");
  std::string out = load_error(line);
  EXPECT_LT(out.size(), 2000u) << out.substr(0, 500);
  EXPECT_NE(out.find("world = -1"), std::string::npos);
}

TEST(Robustness, BinaryGarbage) {
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 100000; ++i)
    junk += static_cast<char>((x = x * 1103515245 + 12345) >> 24);
  load_error(junk);
}

}  // namespace
}  // namespace fsdpgen::test
