// The emitter's refusals from the command line: each spec the code generator
// cannot build is refused by `fsdpgen emit` and `fsdpgen build` for both
// targets with exit status 1, the spec and the problem named, and no output.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "emit/BuildConfig.h"
#include "tests/common/Command.h"

namespace {

namespace fs = std::filesystem;
using fsdpgen::test::CmdResult;
using fsdpgen::test::run;

// One spec the emitter refuses and the words that name its problem.
struct Refusal {
  std::string name;
  std::string spec_text;  // empty: the spec file `spec_file` in specs/
  std::string spec_file;
  std::string problem;
};

// A minimal GPT-2 that the emitter builds, with one change.
std::string small(const std::string& model_extra, const std::string& parallel,
                  const std::string& units = "each block", int context = 32, int micro_batch = 2) {
  return fmt::format(
      "model t {{ vocab = 256 context = {} width = 64 heads = 4 layers = 2 {} }}\n"
      "units {{ {} }}\nparallel {{ world = 2 {} }}\ntrain {{ micro_batch = {} }}\n",
      context, model_extra, units, parallel, micro_batch);
}

const Refusal kRefusals[] = {
    {"Llama", "", "llama-1b.fsdp", "model family llama"},
    {"NormEps", small("norm_eps = 1e-6", ""), "", "norm_eps = 1e-06"},
    {"Bf16ParamFp16Reduce", small("", "precision { param = bf16 reduce = fp16 }"), "",
     "param = bf16 with reduce = fp16"},
    {"Fp16ParamBf16Reduce", small("", "precision { param = fp16 reduce = bf16 }"), "",
     "param = fp16 with reduce = bf16"},
    {"MasterNotFp32", small("", "precision { param = bf16 reduce = bf16 master = bf16 }"), "",
     "master weights must be fp32"},
    {"FinalNormApartFromHead", small("", "", "unit last [final_norm] each block"), "",
     "final_norm and head must be in the same wrap unit"},
    {"OddTokensWith16BitParams", small("", "precision { param = bf16 }", "each block", 33, 1), "",
     "odd micro_batch * context with 16-bit params"},
};

struct Case {
  Refusal refusal;
  std::string target;   // cpu or cuda
  std::string command;  // emit or build
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.refusal.name + "_" + info.param.target + "_" + info.param.command;
}

// How gtest names a failing case's parameter.
void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name({c, 0});
}

class EmitRefuses : public testing::TestWithParam<Case> {
 protected:
  // The spec's path: written into a fresh directory for this case.
  std::string spec_path(const std::string& dir) const {
    const Refusal& r = GetParam().refusal;
    if (r.spec_text.empty()) return std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + r.spec_file;
    const std::string path = dir + "/refused.fsdp";
    std::ofstream(path) << r.spec_text;
    return path;
  }
};

TEST_P(EmitRefuses, ExitsOneNamingTheSpecAndTheProblemAndWritesNothing) {
  const Case& c = GetParam();
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/emit-refuses/" + case_name({c, 0});
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string spec = spec_path(dir);
  // emit writes train.cpp into a directory; build writes an executable.
  const std::string output = c.command == "emit" ? dir + "/out" : dir + "/train";
  const std::string written = c.command == "emit" ? output + "/train.cpp" : output;
  CmdResult r = run(fmt::format("{} {} --target {} -o {}", c.command, spec, c.target, output));
  if (c.target == "cuda" && c.command == "build" && !fsdpgen::kBuildCudaAvailable) {
    // Without the CUDA runtime, building for cuda is refused before planning.
    EXPECT_EQ(r.status, 1) << r.out;
    EXPECT_NE(r.out.find("fsdpgen: error: --target cuda: this fsdpgen was built without the CUDA "
                         "runtime"),
              std::string::npos)
        << r.out;
    EXPECT_FALSE(fs::exists(written));
    GTEST_SKIP() << "fsdpgen was built without the CUDA target (it says so), so its cuda build "
                    "refusals cannot be reached here; `emit --target cuda` checks them";
  }
  EXPECT_EQ(r.status, 1) << r.out;
  const std::string backend = c.target == "cuda" ? "CUDA" : "CPU";
  const std::string expected =
      fmt::format("fsdpgen: error: {}: the {} backend cannot build this spec: ", spec, backend);
  const size_t at = r.out.find(expected);
  ASSERT_NE(at, std::string::npos) << expected << "\n" << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find(c.refusal.problem), std::string::npos) << c.refusal.problem << "\n" << line;
  if (c.refusal.name == "Llama") {  // says what this backend supports and what is planned
    EXPECT_NE(line.find(fmt::format("the {} kernels implement gpt2 only", backend)),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("are planned"), std::string::npos) << line;
  }
  EXPECT_FALSE(fs::exists(written)) << written;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Refusal& r : kRefusals)
    for (const char* target : {"cpu", "cuda"})
      for (const char* command : {"emit", "build"})
        out.push_back({r, target, command});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Specs, EmitRefuses, testing::ValuesIn(cases()), case_name);

}  // namespace
