// fsdpgen-layers, the layer header reader: its JSON for the example layers
// (goldens in tests/layers/golden, which the planner's and emitter's tests
// can read without Clang), its diagnostics for each kind of bad header
// (tests/layers/bad/NAME.h renders NAME.err; FSDPGEN_UPDATE_GOLDEN=1 rewrites
// both kinds of golden), and hostile headers answered with an error within
// seconds. Skipped, saying why, where the reader is not built (no Clang 19).
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/common/Command.h"
#include "tests/layers/ReaderTests.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = FSDPGEN_SOURCE_DIR;

using fsdpgen::test::file_bytes;

// The reader on `header`, run from its directory; its output with that
// directory's absolute path taken out of file names.
fsdpgen::test::CmdResult read_header(const fs::path& header, const std::string& extra = "") {
  fsdpgen::test::CmdResult r =
      fsdpgen::test::run_command("cd " + header.parent_path().string() + " && timeout 60 " +
                                 FSDPGEN_LAYER_READER + " " + header.filename().string() + extra);
  const std::string dir = header.parent_path().string() + "/";
  for (size_t at; (at = r.out.find(dir)) != std::string::npos;)
    r.out.erase(at, dir.size());
  return r;
}

void expect_golden(const fs::path& golden, const std::string& text) {
  if (std::getenv("FSDPGEN_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << text;
    return;
  }
  ASSERT_TRUE(fs::exists(golden)) << "missing golden " << golden
                                  << " (run with FSDPGEN_UPDATE_GOLDEN=1)";
  EXPECT_EQ(text, file_bytes(golden)) << golden;
}

TEST(LayerReader, ExampleLayersReadAsTheirGoldens) {
  SKIP_WITHOUT_READER();
  for (const char* name : {"gelu_mlp", "swiglu_mlp"}) {
    const auto r = read_header(kSource / "examples/layers" / (std::string(name) + ".h"));
    ASSERT_EQ(r.status, 0) << r.out;
    expect_golden(kSource / "tests/layers/golden" / (std::string(name) + ".json"), r.out);
  }
}

class BadHeader : public testing::TestWithParam<std::string> {};

TEST_P(BadHeader, DiagnosticsMatch) {
  SKIP_WITHOUT_READER();
  const fs::path header = kSource / "tests/layers/bad" / (GetParam() + ".h");
  const auto start = std::chrono::steady_clock::now();
  const auto r = read_header(header);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_LT(seconds, 20.0) << "an error within seconds";
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
  expect_golden(fs::path(header).replace_extension(".err"), r.out);
}

std::vector<std::string> bad_headers() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(kSource / "tests/layers/bad"))
    if (e.path().extension() == ".h") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Headers, BadHeader, testing::ValuesIn(bad_headers()),
                         [](const auto& info) { return info.param; });

// Hostile inputs made on the fly: a 10 MB header, a header that is a
// directory, arguments the reader does not take.
TEST(LayerReader, HostileInputsAreClearErrors) {
  SKIP_WITHOUT_READER();
  const fs::path dir = fs::path(testing::TempDir()) / "hostile_layers";
  fs::create_directories(dir);
  {
    std::ofstream big(dir / "big.h");
    const std::string line = "// " + std::string(97, 'x') + "\n";
    for (int i = 0; i < 100000; ++i)
      big << line;
  }
  const auto start = std::chrono::steady_clock::now();
  auto r = read_header(dir / "big.h");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("too large for a layer header"), std::string::npos) << r.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  r = fsdpgen::test::run_command(std::string(FSDPGEN_LAYER_READER) + " " + dir.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("not a regular file"), std::string::npos) << r.out;
  r = fsdpgen::test::run_command(std::string(FSDPGEN_LAYER_READER) + " " +
                                 (dir / "absent.h").string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("no such file"), std::string::npos) << r.out;
  r = fsdpgen::test::run_command(std::string(FSDPGEN_LAYER_READER) + " --frobnicate");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("usage: fsdpgen-layers"), std::string::npos) << r.out;
}

// Nesting past any stack, made on the fly: a hundred thousand parentheses in
// a function body stop at the bracket depth; a million nested template
// arguments or unary minuses, which no bracket depth bounds, run past the
// reader's stack and say so. Each is exit 1 within seconds, never a crash.
TEST(LayerReader, DeepNestingIsANamedErrorWithinSeconds) {
  SKIP_WITHOUT_READER();
  const fs::path dir = fs::path(testing::TempDir()) / "deep_layers";
  fs::create_directories(dir);
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i)
      out += s;
    return out;
  };
  std::ofstream(dir / "parentheses.h")
      << "inline int f() { return " << repeat("(", 100000) << "1" << repeat(")", 100000) << "; }\n";
  std::ofstream(dir / "template_arguments.h")
      << "template <class T>\nstruct W {};\ninline void f() { " << repeat("W<", 1000000) << "int"
      << repeat(">", 1000000) << " w; }\n";
  std::ofstream(dir / "unary.h") << "inline int f() { return " << repeat("- ", 1000000) << "1; }\n";
  for (const auto& [name, said] :
       {std::pair{"parentheses.h", "fatal error: bracket nesting level exceeded maximum of 256"},
        std::pair{"template_arguments.h",
                  "fsdpgen-layers: error: template_arguments.h: nested too deeply to read"},
        std::pair{"unary.h", "fsdpgen-layers: error: unary.h: nested too deeply to read"}}) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = read_header(dir / name);
    EXPECT_EQ(r.status, 1) << name << ":\n" << r.out.substr(0, 2000);
    EXPECT_NE(r.out.find(said), std::string::npos) << name << ":\n" << r.out.substr(0, 2000);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0)
        << name;
  }
}

// An #include of a FIFO names it where it is included; opening it (which
// waits for a writer that never comes) is not tried.
TEST(LayerReader, IncludedFifoIsANamedErrorWithinSeconds) {
  SKIP_WITHOUT_READER();
  const fs::path dir = fs::path(testing::TempDir()) / "fifo_layers";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(mkfifo((dir / "pipe.h").c_str(), 0644), 0);
  std::ofstream(dir / "includes_fifo.h") << "// a FIFO included\n#include \"pipe.h\"\n";
  const auto start = std::chrono::steady_clock::now();
  const auto r = read_header(dir / "includes_fifo.h");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("includes_fifo.h:2:10: fatal error: 'pipe.h' is not a regular file"),
            std::string::npos)
      << r.out;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
}

}  // namespace
