// `fsdpgen check-layer`: a correct layer passes every check (in double where
// it compiles so, in float where it calls fsdpgen's kernels, and in bf16
// against fp32); each bug a layer author makes (tests/layers/check/
// tanh_scale.h broken one line at a time, and the example GeluMlp with a
// Saved array declared too small) fails with its message, the offending
// member and the header's line; bad command lines exit 2 naming the mistake.
// Skipped, saying why, where the reader is not built (no Clang 19).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "tests/common/Command.h"
#include "tests/layers/ReaderTests.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = FSDPGEN_SOURCE_DIR;

using fsdpgen::test::file_bytes;

// `header` with `from` replaced by `to`, written as DIR/NAME.h in a folder
// of the test's own; check-layer run there on it.
fsdpgen::test::CmdResult check_mutant(const std::string& name, const fs::path& header,
                                      const std::string& from, const std::string& to,
                                      const std::string& args) {
  std::string text = file_bytes(header);
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  const fs::path dir = fs::temp_directory_path() / "fsdpgen-check-layer-tests" / name;
  fs::create_directories(dir);
  std::ofstream(dir / (name + ".h")) << text;
  return fsdpgen::test::run_command("cd " + dir.string() + " && " + FSDPGEN_BIN + " check-layer " +
                                    name + ".h " + args);
}

const fs::path kTanh = kSource / "tests/layers/check/tanh_scale.h";

fsdpgen::test::CmdResult check_tanh(const std::string& name, const std::string& from,
                                    const std::string& to) {
  return check_mutant(name, kTanh, from, to, "TanhScale --hyper d_model=8");
}

// The report's lines that are not "ok" lines.
std::string failures(const std::string& out) {
  std::istringstream in(out);
  std::string kept;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("ok    ", 0) != 0 && line.rfind("      gradients against", 0) != 0 &&
        line.rfind("check-layer ", 0) != 0)
      kept += line + "\n";
  return kept;
}

TEST(CheckLayer, CorrectLayerPassesInDouble) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("tanh_ok", "", "");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("reference instance TanhScale<double, double>"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok    gradient w.grad: 8 of 8 elements"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ok    determinism: two runs agree bit for bit"), std::string::npos);
  EXPECT_EQ(failures(r.out), "check-layer: all checks passed\n");
}

TEST(CheckLayer, SavedDeclaredTooSmall) {
  SKIP_WITHOUT_READER();
  const auto r =
      check_tanh("saved_small", "Saved<T, \"d_model\"> t;", "Saved<T, \"d_model - 1\"> t;");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(failures(r.out),
            "FAIL  memory: forward wrote past the end of 't' (a Saved array, \"d_model - 1\" = 7 "
            "per token x 6 tokens = 42 elements, 336 bytes)\n"
            "      at saved_small.h:29 in TanhScale<double, double>::forward\n"
            "check-layer: 1 check failed\n");
}

TEST(CheckLayer, ScratchDeclaredTooSmall) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("scratch_small", "Scratch<T, \"d_model\"> dpre;",
                            "Scratch<T, \"d_model / 2\"> dpre;");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(failures(r.out),
            "FAIL  memory: backward wrote past the end of 'dpre' (a Scratch array, \"d_model / "
            "2\" = 4 per token x 6 tokens = 24 elements, 192 bytes)\n"
            "      at scratch_small.h:37 in TanhScale<double, double>::backward\n"
            "check-layer: 1 check failed\n");
}

TEST(CheckLayer, WriteBeforeAnArray) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("before", "t.data[i] = std::tanh", "t.data[i - 1] = std::tanh");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(failures(r.out),
            "FAIL  memory: forward wrote 8 bytes before the start of 't' (a Saved array, "
            "\"d_model\" = 8 per token x 6 tokens = 48 elements)\n"
            "      at before.h:29 in TanhScale<double, double>::forward\n"
            "check-layer: 1 check failed\n");
}

TEST(CheckLayer, ForwardWritesScratch) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("forward_scratch", "y[i] = t.data[i] + b.value[i % C];",
                            "y[i] = t.data[i] + b.value[i % C];\n      dpre.data[i] = 0;");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(failures(r.out),
            "FAIL  memory: forward wrote 'dpre' (a Scratch array), which forward may write only "
            "y and its Saved arrays (and the GEMM workspace); Scratch arrays are set for "
            "backward calls only: keep what backward needs in a Saved array\n"
            "      at forward_scratch.h:31 in TanhScale<double, double>::forward\n"
            "check-layer: 1 check failed\n");
}

TEST(CheckLayer, BackwardWritesItsInput) {
  SKIP_WITHOUT_READER();
  const auto r =
      check_tanh("backward_input", "dx[i] = dpre.data[i] * w.value[i % C];",
                 "dx[i] = dpre.data[i] * w.value[i % C];\n      const_cast<T*>(x)[i] = 0;");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(failures(r.out),
            "FAIL  memory: backward wrote 'x' (the input x), which backward may write only dx, "
            "its Scratch arrays and the gradients (and the GEMM workspace)\n"
            "      at backward_input.h:42 in TanhScale<double, double>::backward\n"
            "check-layer: 1 check failed\n");
}

TEST(CheckLayer, BackwardWritesSaved) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("backward_saved", "dpre.data[i] = dy[i] * (1 - t.data[i] * t.data[i]);",
                            "dpre.data[i] = dy[i] * (1 - t.data[i] * t.data[i]), t.data[i] = 0;");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(failures(r.out).find("FAIL  memory: backward wrote 't' (a Saved array), which "
                                 "backward may write only dx"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("at backward_saved.h:37 in TanhScale<double, double>::backward"),
            std::string::npos)
      << r.out;
}

TEST(CheckLayer, GradientOverwrittenNotAdded) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("grad_overwritten", "w.grad[i % C] += dpre.data[i] * x[i];",
                            "w.grad[i % C] = 0;\n      w.grad[i % C] += dpre.data[i] * x[i];");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(failures(r.out).find("FAIL  gradient w.grad: 8 of 8 checked elements (of 8) differ"),
            std::string::npos)
      << r.out;
}

TEST(CheckLayer, DxAddedToNotOverwritten) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("dx_added", "dx[i] = dpre.data[i]", "dx[i] += dpre.data[i]");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(failures(r.out).find("FAIL  output: 48 of 48 elements of dx are NaN after backward "
                                 "(dx is filled with NaN before: backward must overwrite it, not "
                                 "add to it)"),
            std::string::npos)
      << r.out;
}

TEST(CheckLayer, WrongGradient) {
  SKIP_WITHOUT_READER();
  const auto r = check_tanh("wrong_gradient", "dpre.data[i] * x[i];", "2 * dpre.data[i] * x[i];");
  EXPECT_EQ(r.status, 1) << r.out;
  const std::string f = failures(r.out);
  EXPECT_NE(f.find("FAIL  gradient w.grad: 8 of 8 checked elements (of 8) differ; the worst"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(f.find("gradient dx"), std::string::npos) << r.out;
  EXPECT_EQ(f.find("gradient b.grad"), std::string::npos) << r.out;
}

// Small gradient errors fail too, not only a doubled gradient: w.grad off by
// 1e-4 of itself where the layer is checked in double, and dx off by 10% in
// float (GeluMlp calls fsdpgen's kernels, so it is checked as it trains).
TEST(CheckLayer, SmallGradientErrorsFail) {
  SKIP_WITHOUT_READER();
  const auto in_double =
      check_tanh("gradient_1e-4", "dpre.data[i] * x[i];", "(1 + 1e-4) * dpre.data[i] * x[i];");
  EXPECT_EQ(in_double.status, 1) << in_double.out;
  EXPECT_NE(in_double.out.find("reference instance TanhScale<double, double>"), std::string::npos)
      << in_double.out;
  EXPECT_NE(failures(in_double.out).find("FAIL  gradient w.grad: "), std::string::npos)
      << in_double.out;
  // The report shows the difference, not two values that print alike.
  EXPECT_TRUE(std::regex_search(
      failures(in_double.out),
      std::regex(
          R"(is -?[0-9]\.[0-9]{6}e[-+][0-9]+ against -?[0-9]\.[0-9]{6}e[-+][0-9]+: off by [0-9.e+-]+ where [0-9.e+-]+ is allowed)")))
      << in_double.out;

  const auto in_float = check_mutant(
      "gelu_dx_10", kSource / "examples/layers/gelu_mlp.h", "tokens, C, F, cpu.ws);\n  }\n};",
      "tokens, C, F, cpu.ws);\n    for (int64_t i = 0; i < tokens * C; ++i)\n      dx[i] *= "
      "1.1f;\n  }\n};",
      "GeluMlp --hyper d_model=8 d_ff=20");
  EXPECT_EQ(in_float.status, 1) << in_float.out;
  EXPECT_NE(in_float.out.find("checked with T = float"), std::string::npos) << in_float.out;
  EXPECT_NE(failures(in_float.out).find("FAIL  gradient dx: "), std::string::npos) << in_float.out;
}

TEST(CheckLayer, StateKeptBetweenCalls) {
  SKIP_WITHOUT_READER();
  const auto r =
      check_tanh("keeps_state",
                 "    const int64_t C = hyper.d_model;\n    for (int64_t i = 0; i < tokens * C; "
                 "++i)\n      dpre",
                 "    const int64_t C = hyper.d_model;\n    static int calls = 0;\n    b.grad[0] "
                 "+= calls++;\n    for (int64_t i = 0; i < tokens * C; ++i)\n      dpre");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(failures(r.out).find("FAIL  determinism: 1 of 112 values of y, dx and the gradients "
                                 "differ between two runs from the same values"),
            std::string::npos)
      << r.out;
}

// The example layer calls fsdpgen's kernels: checked in float, and in bf16
// against it; the same layer with `pre` declared half its size (a user's
// bug of 2026-11-25, which trained silently) names the member and the line.
TEST(CheckLayer, ExampleGeluMlpInFloatAndBf16) {
  SKIP_WITHOUT_READER();
  const fs::path gelu = kSource / "examples/layers/gelu_mlp.h";
  const auto r =
      check_mutant("gelu_ok", gelu, "", "", "GeluMlp --hyper d_model=8 d_ff=20 --dtype bf16");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("note  GeluMlp does not compile with T = double"), std::string::npos);
  EXPECT_NE(r.out.find("ok    bf16 proj_w.grad: max error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check-layer: all checks passed"), std::string::npos) << r.out;

  const auto bad = check_mutant("gelu_small", gelu, "Saved<T, \"d_ff\"> pre;",
                                "Saved<T, \"d_ff / 2\"> pre;", "GeluMlp --hyper d_model=8 d_ff=20");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("FAIL  memory: forward wrote past the end of 'pre' (a Saved array, "
                         "\"d_ff / 2\" = 10 per token x 6 tokens = 60 elements, 240 bytes)"),
            std::string::npos)
      << bad.out;
  EXPECT_NE(bad.out.find("      at gelu_small.h:35 in GeluMlp<float, float>::forward"),
            std::string::npos)
      << bad.out;
}

TEST(CheckLayer, CommandLineMistakes) {
  SKIP_WITHOUT_READER();
  const std::string h = kTanh.string();
  auto r = fsdpgen::test::run("check-layer " + h + " TanhScal --hyper d_model=8");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("declares no layer 'TanhScal' (did you mean 'TanhScale'?); it declares "
                       "'TanhScale'"),
            std::string::npos)
      << r.out;
  r = fsdpgen::test::run("check-layer " + h + " TanhScale");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("TanhScale needs a value for 'd_model': small ones check fastest, e.g. "
                       "--hyper d_model=8"),
            std::string::npos)
      << r.out;
  r = fsdpgen::test::run("check-layer " + h + " TanhScale --hyper d_model=8 d_mdl=3");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--hyper d_mdl=3: TanhScale has no hyper-parameter 'd_mdl'; it has "
                       "'d_model'"),
            std::string::npos)
      << r.out;
  r = fsdpgen::test::run("check-layer " + h + " TanhScale --hyper d_model=-8");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("'-8' is not a positive integer"), std::string::npos) << r.out;
  r = fsdpgen::test::run("check-layer " + h + ".missing TanhScale --hyper d_model=8");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is not a file"), std::string::npos) << r.out;
}

}  // namespace
