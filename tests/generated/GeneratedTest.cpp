// Generated: the checked-in output of fsdpgen (generated/) is what fsdpgen
// generates today, byte for byte; every line of it, and of the CUDA emission
// of the same specs, fits in 100 columns; and the template is a real program
// that compiles on its own. Regenerate with:
//   fsdpgen emit specs/tiny.fsdp --target cpu -o generated/tiny   (from the repository root)
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/emit/BuildConfig.h"
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

// The lines of a file longer than kColumns, as "line N (M columns)".
std::string long_lines(const std::filesystem::path& file) {
  constexpr size_t kColumns = 100;
  std::ifstream in(file);
  std::string found, line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.size() > kColumns) found += fmt::format("line {} ({} columns)\n", n, line.size());
  return found;
}

TEST_P(Generated, LinesFitIn100Columns) {
  const std::string name = GetParam();
  const std::filesystem::path checked_in =
      std::filesystem::path(FSDPGEN_SOURCE_DIR) / "generated" / name / "train.cpp";
  ASSERT_TRUE(std::filesystem::exists(checked_in)) << checked_in;
  EXPECT_EQ(long_lines(checked_in), "") << checked_in;
  std::filesystem::path cuda = std::filesystem::path(FSDPGEN_WORK) / (name + "-cuda");
  std::filesystem::remove_all(cuda);
  CmdResult r =
      run_command(fmt::format("cd {} && {} emit specs/{}.fsdp --target cuda --gpu h100-sxm -o {}",
                              FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, name, cuda.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(long_lines(cuda / "train.cpp"), "") << cuda / "train.cpp";
}

INSTANTIATE_TEST_SUITE_P(Specs, Generated, ::testing::Values("tiny", "gpt2-124m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Template, CompilesOnItsOwn) {
  CmdResult r = run_command(fmt::format("{} {} -fsyntax-only {}/templates/train.cpp",
                                        kBuildCompiler, kBuildCompileFlags, FSDPGEN_SOURCE_DIR));
  EXPECT_EQ(r.status, 0) << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
