// Golden diagnostics: every tests/bad/NAME.fsdp renders exactly NAME.err.
// Files named warn_* must check with warnings only; all others must fail.
// FSDPGEN_UPDATE_GOLDEN=1 rewrites the .err files (review the diff!).
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/common/TestName.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

class Golden : public testing::TestWithParam<std::filesystem::path> {};

TEST_P(Golden, DiagnosticsMatch) {
  const std::filesystem::path& spec = GetParam();
  std::string name = spec.filename().string();
  FrontendResult r = load_spec_text(name, read_text(spec));
  bool warn_only = name.rfind("warn_", 0) == 0;
  if (warn_only)
    EXPECT_TRUE(r.spec.has_value()) << name << " must check with warnings only:\n" << r.diagnostics;
  else
    EXPECT_FALSE(r.spec.has_value()) << name << " must fail";
  EXPECT_FALSE(r.diagnostics.empty());
  std::filesystem::path golden = spec;
  golden.replace_extension(".err");
  if (std::getenv("FSDPGEN_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << r.diagnostics;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(golden)) << "missing golden " << golden;
  EXPECT_EQ(r.diagnostics, read_text(golden)) << "for " << spec;
}

std::string test_name(const testing::TestParamInfo<std::filesystem::path>& info) {
  return test_name_of(info.param.stem().string());
}

INSTANTIATE_TEST_SUITE_P(BadSpecs, Golden, testing::ValuesIn(files_in("tests/bad", ".fsdp")),
                         test_name);

TEST(GoldenCorpus, IsLargeAndComplete) {
  auto specs = files_in("tests/bad", ".fsdp");
  EXPECT_GE(specs.size(), 30u);
  for (const auto& err : files_in("tests/bad", ".err")) {
    std::filesystem::path spec = err;
    spec.replace_extension(".fsdp");
    EXPECT_TRUE(std::filesystem::exists(spec)) << "golden without a spec: " << err;
  }
}

}  // namespace
}  // namespace fsdpgen::test
