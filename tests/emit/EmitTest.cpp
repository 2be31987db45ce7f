// Target support's refusals from the command line: each spec a backend cannot
// build is refused by `fsdpgen emit` and `fsdpgen build` for both targets with
// exit status 1, the spec and the problem named, and no output; `fsdpgen check`
// and `fsdpgen plan`, which build nothing, say the same as a warning and go on.
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/emit/BuildConfig.h"
#include "tests/common/Command.h"

namespace {

namespace fs = std::filesystem;
using fsdpgen::test::CmdResult;
using fsdpgen::test::run;

// One spec the backends refuse and the words that name its problem.
struct Refusal {
  std::string name;
  std::string spec_text;  // empty: the spec file `spec_file` in specs/
  std::string spec_file;
  std::string problem;
  bool cpu_builds = false;  // only the CUDA backend refuses it
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
    {"LlamaWideHeads",
     "model t { family = llama vocab = 256 context = 32 width = 1024 heads = 2 layers = 2 }\n"
     "units { each block }\nparallel { world = 2 }\ntrain { micro_batch = 2 }\n",
     "", "model family llama with head size 512", true},
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
    {"Qwen2Biases", "", "qwen2.5-0.5b.fsdp", "qkv_bias = true on GPUs", true},
    {"Qwen3QkNorm", "", "qwen3-0.6b.fsdp", "qk_norm = true on GPUs", true},
    {"Olmo2QkNormAcrossHeads", "", "olmo2-1b.fsdp", "qk_norm = across_heads on GPUs", true},
    {"MistralSlidingWindow", "", "mistral-7b-v0.1.fsdp",
     "sliding_window = 4096 (shorter than the context 8192) on GPUs", true},
};

struct Case {
  Refusal refusal;
  std::string target;   // cpu or cuda
  std::string command;  // emit, build, plan or check (check: cpu only)
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return info.param.refusal.name + "_" + info.param.target + "_" + info.param.command;
}

// How gtest names a failing case's parameter.
void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name({c, 0});
}

class TargetRefuses : public testing::TestWithParam<Case> {
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

// The line of `out` that begins with `expected`, or empty.
std::string line_starting(const std::string& out, const std::string& expected) {
  const size_t at = out.find(expected);
  return at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
}

void expect_names_problem(const Refusal& refusal, const std::string& backend,
                          const std::string& line) {
  EXPECT_NE(line.find(refusal.problem), std::string::npos) << refusal.problem << "\n" << line;
  if (refusal.name == "LlamaWideHeads") {  // says what the kernels take
    EXPECT_NE(line.find("take heads of at most 256"), std::string::npos) << backend << line;
  }
}

// check (for this CPU: no GPU made visible) and plan warn and go on.
void expect_warns(const Case& c, const std::string& spec) {
  const std::string backend = c.target == "cuda" ? "CUDA" : "CPU";
  CmdResult r =
      c.command == "check"
          ? fsdpgen::test::run_command(
                fmt::format("CUDA_VISIBLE_DEVICES= {} check {}", FSDPGEN_BIN, spec))
          : run(fmt::format("plan {} --gpu {}", spec, c.target == "cuda" ? "h100-sxm" : "cpu"));
  // plan: 0 when the plan fits the device, 4 when not; the whole plan either way.
  EXPECT_TRUE(r.status == 0 || (c.command == "plan" && r.status == 4)) << r.out;
  EXPECT_NE(r.out.find(c.command == "check" ? ": ok: model" : "planned in "), std::string::npos)
      << r.out;
  const std::string expected = fmt::format(
      "fsdpgen: warning: {}: the {} backend cannot build this spec yet: ", spec, backend);
  const std::string line = line_starting(r.out, expected);
  ASSERT_FALSE(line.empty()) << expected << "\n" << r.out;
  expect_names_problem(c.refusal, backend, line);
}

TEST_P(TargetRefuses, EmitAndBuildExitOneWritingNothingCheckAndPlanWarn) {
  const Case& c = GetParam();
  const std::string dir =
      std::string(FSDPGEN_E2E_WORK_ROOT) + "/target-refuses/" + case_name({c, 0});
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string spec = spec_path(dir);
  if (c.command == "check" || c.command == "plan") return expect_warns(c, spec);
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
  const std::string line = line_starting(r.out, expected);
  ASSERT_FALSE(line.empty()) << expected << "\n" << r.out;
  expect_names_problem(c.refusal, backend, line);
  EXPECT_FALSE(fs::exists(written)) << written;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const Refusal& r : kRefusals)
    for (const char* target : {"cpu", "cuda"}) {
      if (r.cpu_builds && std::string(target) == "cpu") continue;
      for (const char* command : {"emit", "build", "plan"})
        out.push_back({r, target, command});
      if (std::string(target) == "cpu") out.push_back({r, target, "check"});
    }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Specs, TargetRefuses, testing::ValuesIn(cases()), case_name);

}  // namespace
