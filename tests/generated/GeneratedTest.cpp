// Generated: the checked-in output of fsdpgen (generated/) is what fsdpgen
// generates today, byte for byte; and the template is a real program that
// compiles on its own. Regenerate with:
//   fsdpgen emit specs/tiny.fsdp --target cpu -o generated/tiny   (from the repository root)
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "emit/BuildConfig.h"
#include "tests/common/Command.h"

namespace fsdpgen::test {
namespace {

class Generated : public ::testing::TestWithParam<std::string> {};

TEST_P(Generated, MatchesWhatFsdpgenEmits) {
  const std::string name = GetParam();
  std::filesystem::path out = std::filesystem::path(FSDPGEN_WORK) / name;
  std::filesystem::remove_all(out);
  CmdResult r = run_command(fmt::format("cd {} && {} emit specs/{}.fsdp --target cpu -o {}",
                                        FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, name, out.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  std::filesystem::path checked_in =
      std::filesystem::path(FSDPGEN_SOURCE_DIR) / "generated" / name / "train.cpp";
  ASSERT_TRUE(std::filesystem::exists(checked_in)) << checked_in;
  CmdResult diff =
      run_command(fmt::format("diff -u {} {}", checked_in.string(), (out / "train.cpp").string()));
  EXPECT_EQ(diff.status, 0) << "generated/" << name
                            << " is stale; regenerate it with: fsdpgen emit --target cpu specs/"
                            << name << ".fsdp -o generated/" << name << "\n"
                            << diff.out.substr(0, 4000);
}

INSTANTIATE_TEST_SUITE_P(Specs, Generated, ::testing::Values("tiny", "gpt2-124m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Template, CompilesOnItsOwn) {
  CmdResult r = run_command(fmt::format("{} {} -fsyntax-only {}/emit/templates/train.cpp",
                                        kBuildCompiler, kBuildCompileFlags, FSDPGEN_SOURCE_DIR));
  EXPECT_EQ(r.status, 0) << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
