// Generated: the checked-in gallery (generated/, generated/README.md) is what
// fsdpgen emits today, byte for byte; every line of it, and of the CUDA
// emission of the CPU programs that have no CUDA twin here, fits in 100 columns;
// and the template is a real program that compiles on its own. Each program is
// regenerated from the repository root with the command its failure prints.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/emit/BuildConfig.h"
#include "tests/common/Command.h"

namespace fsdpgen::test {
namespace {

// One program of the gallery: generated/<name>/train.cpp, emitted from spec
// (a path from the repository root: specs/ or the program's own
// generated/<name>/spec.fsdp) for target with flags.
struct GalleryProgram {
  const char* name;
  const char* spec;
  const char* target;  // cpu | cuda
  const char* flags;   // more emit flags
  // A CPU program whose spec the CUDA target builds and whose CUDA twin is not in the gallery:
  // that emission's widths are checked too.
  bool cuda_lines;
};

// What gtest prints for a row: its directory.
void PrintTo(const GalleryProgram& p, std::ostream* os) {
  *os << p.name;
}

// The gallery, one row per directory of generated/ (generated/README.md says what each shows).
constexpr GalleryProgram kGallery[] = {
    {"tiny", "specs/tiny.fsdp", "cpu", "", false},  // its CUDA twin is tiny-cuda
    {"gpt2-124m", "specs/gpt2-124m.fsdp", "cpu", "", true},
    {"tiny-cuda", "specs/tiny.fsdp", "cuda", "--gpu h100-sxm", false},
    {"llama-hybrid", "generated/llama-hybrid/spec.fsdp", "cpu", "", true},
    {"offload", "generated/offload/spec.fsdp", "cuda", "--gpu h100-sxm", false},
    {"muon", "generated/muon/spec.fsdp", "cpu", "", false},  // Muon: CPU target only
};

// The emit command's arguments for p into dir.
std::string emit_args(const GalleryProgram& p, const std::string& dir) {
  std::string flags = *p.flags ? std::string(" ") + p.flags : "";
  return fmt::format("emit {} --target {}{} -o {}", p.spec, p.target, flags, dir);
}

std::filesystem::path checked_in(const GalleryProgram& p) {
  return std::filesystem::path(FSDPGEN_SOURCE_DIR) / "generated" / p.name / "train.cpp";
}

// fsdpgen with args, run from the repository root (the specs' paths and the
// generated header's "from SPEC" are relative to it).
CmdResult fsdpgen_at_root(const std::string& args) {
  return run_command(fmt::format("cd {} && {} {}", FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, args));
}

class Generated : public ::testing::TestWithParam<GalleryProgram> {};

TEST_P(Generated, MatchesWhatFsdpgenEmits) {
  const GalleryProgram& p = GetParam();
  std::filesystem::path out = std::filesystem::path(FSDPGEN_WORK) / p.name;
  std::filesystem::remove_all(out);
  CmdResult r = fsdpgen_at_root(emit_args(p, out.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  ASSERT_TRUE(std::filesystem::exists(checked_in(p))) << checked_in(p);
  CmdResult diff = run_command(
      fmt::format("diff -u {} {}", checked_in(p).string(), (out / "train.cpp").string()));
  EXPECT_EQ(diff.status, 0) << "generated/" << p.name
                            << " is stale; regenerate it from the repository root with: fsdpgen "
                            << emit_args(p, fmt::format("generated/{}", p.name)) << "\n"
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
  const GalleryProgram& p = GetParam();
  ASSERT_TRUE(std::filesystem::exists(checked_in(p))) << checked_in(p);
  EXPECT_EQ(long_lines(checked_in(p)), "") << checked_in(p);
  if (!p.cuda_lines) return;
  std::filesystem::path cuda =
      std::filesystem::path(FSDPGEN_WORK) / (std::string(p.name) + ".cuda-lines");
  std::filesystem::remove_all(cuda);
  CmdResult r = fsdpgen_at_root(
      fmt::format("emit {} --target cuda --gpu h100-sxm -o {}", p.spec, cuda.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(long_lines(cuda / "train.cpp"), "") << cuda / "train.cpp";
}

INSTANTIATE_TEST_SUITE_P(Gallery, Generated, ::testing::ValuesIn(kGallery), [](const auto& info) {
  std::string n = info.param.name;
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
