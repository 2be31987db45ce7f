// Template: the substituter is strict about regions and values.
#include <gtest/gtest.h>

#include "codegen/emit/Template.h"

namespace fsdpgen {
namespace {

const char* kText =
    "a\n"
    "// fsdpgen:begin body\n"
    "placeholder\n"
    "// fsdpgen:end body\n"
    "z\n";

TEST(Template, ReplacesRegionsWithTheirValues) {
  EXPECT_EQ(fill_template("t", kText, {{"body", "x\ny\n"}}), "a\nx\ny\nz\n");
}

void expect_error(const std::string& text, const std::map<std::string, std::string>& values,
                  const std::string& message) {
  try {
    fill_template("t.cpp", text, values);
    ADD_FAILURE() << "no error; wanted: " << message;
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Template, RejectsUnknownUnusedLeftoverAndMalformedMarkers) {
  expect_error(kText, {}, "t.cpp:2: no value for region 'body'");
  expect_error(kText, {{"body", ""}, {"extra", ""}}, "value 'extra' has no region");
  expect_error("// fsdpgen:begin body\nx\n", {{"body", ""}}, "region 'body' is never closed");
  expect_error("// fsdpgen:end body\n", {{"body", ""}}, "'end body' without a begin");
  expect_error("// fsdpgen:begin a\n// fsdpgen:begin b\n", {{"a", ""}, {"b", ""}},
               "region 'b' begins inside region 'a'");
  expect_error("int x;  // fsdpgen:begin body\n", {{"body", ""}}, "malformed marker line");
  expect_error(std::string(kText) + kText, {{"body", ""}}, "region 'body' appears twice");
}

TEST(Template, TheTrainTemplateIsEmbedded) {
  std::string_view t = embedded_template("train.cpp");
  EXPECT_NE(t.find("// fsdpgen:begin ops"), std::string_view::npos);
  EXPECT_THROW(embedded_template("missing.cpp"), std::logic_error);
}

}  // namespace
}  // namespace fsdpgen
