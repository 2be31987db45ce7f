// `fsdpgen build --check`: a binary whose buffers and custom layers' arrays
// sit between red zones. A correct layer trains bit for bit as without
// --check; the example GeluMlp with its Saved `pre` declared d_ff / 2 (a
// user's bug of 2026-11-25 that trained silently) stops at the header's line
// under AddressSanitizer, and, with AddressSanitizer's poisoning off (what
// uninstrumented code such as the runtime's kernels amounts to), at the op
// and the array by the canaries; every rank exits, none hangs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

// fsdpgen building dir/train from the gelu config, with `header_text` as its
// MLP, with `flags`.
CmdResult build_gelu_with(const fs::path& dir, const std::string& header_text,
                          const std::string& flags) {
  std::ofstream(dir / "gelu_mlp.h") << header_text;
  E2eConfig c;
  c.layers = "  import = \"gelu_mlp.h\"\n  mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)\n";
  std::ofstream(dir / "e2e.fsdp") << c.spec();
  return run_command(fmt::format("cd {} && {} e2e.fsdp -o train --target cpu {} 2>&1", dir.string(),
                                 FSDPGEN_BIN, flags));
}

// Builds dir/train (with --check: red zones); fails the test on error.
fs::path build_gelu(const fs::path& dir, const std::string& header_text, bool check,
                    const std::string& flags = "") {
  const CmdResult r = build_gelu_with(dir, header_text, (check ? "--check " : "") + flags);
  EXPECT_EQ(r.status, 0) << r.out;
  return dir / "train";
}

// The example GeluMlp with its Saved `pre` declared half its size.
std::string gelu_saved_too_small(const std::string& header) {
  std::string h = header;
  const std::string decl = "Saved<T, \"d_ff\"> pre;";
  EXPECT_NE(h.find(decl), std::string::npos);
  if (h.find(decl) != std::string::npos)
    h.replace(h.find(decl), decl.size(), "Saved<T, \"d_ff / 2\"> pre;");
  return h;
}

std::string gelu_header() {
  return file_bytes(fs::path(FSDPGEN_SOURCE_DIR) / "examples" / "layers" / "gelu_mlp.h");
}

TEST(BuildCheck, ACorrectLayerTrainsAsWithout) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("check_build_ok");
  fs::create_directories(dir / "plain");
  fs::create_directories(dir / "check");
  const fs::path plain = build_gelu(dir / "plain", gelu_header(), false);
  const fs::path check = build_gelu(dir / "check", gelu_header(), true);
  CmdResult a = run_binary(2, plain, "--steps 4 --metrics metrics.jsonl");
  ASSERT_EQ(a.status, 0) << a.out;
  CmdResult b = run_binary(2, check, "--steps 4 --metrics metrics.jsonl");
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(b.out.find("built with --check: 256-byte red zones around every buffer"),
            std::string::npos)
      << b.out;
  EXPECT_EQ(a.out.find("built with --check"), std::string::npos) << a.out;
  // The banner names the inits truly: the family's rule, and the layer's own.
  EXPECT_NE(a.out.find("weights: GPT-2 init; custom layers as their headers declare: mlp.fc_w "
                       "normal(0.02), mlp.fc_b zeros, mlp.proj_w normal(0.02), mlp.proj_b zeros"),
            std::string::npos)
      << a.out;
  const std::vector<double> want = read_losses(dir / "plain" / "metrics.jsonl");
  const std::vector<double> got = read_losses(dir / "check" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  EXPECT_EQ(got, want) << "the same ops in the same order: bit for bit";
}

TEST(BuildCheck, ASavedArrayDeclaredTooSmallStopsTheRun) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("check_build_saved_small");
  // The build's own layer check would refuse it (LayerCheckAtBuild below).
  const fs::path train =
      build_gelu(dir, gelu_saved_too_small(gelu_header()), true, "--no-layer-check");

  // AddressSanitizer: the write into the poisoned zone, at the header's line.
  CmdResult r = run_binary(2, train, "--steps 2");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.status, 124) << "timed out: a rank hung";
  EXPECT_NE(r.out.find("AddressSanitizer: use-after-poison"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("gelu_mlp.h:35"), std::string::npos) << r.out;

  // Without it, the canaries after the op.
  setenv("ASAN_OPTIONS", "allow_user_poisoning=0", 1);
  r = run_binary(2, train, "--steps 2");
  unsetenv("ASAN_OPTIONS");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.status, 124) << "timed out: a rank hung";
  EXPECT_NE(r.out.find("error: --check: op "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote past the end of the custom layer array 'transformer.h.0.mlp.pre' "
                       "(in buffer 'acts."),
            std::string::npos)
      << r.out;
}

// A build runs check-layer's checks on the spec's layers at its shapes: the
// overrunning GeluMlp stops the build with check-layer's message and leaves
// no binary; --no-layer-check builds it. A layer that passes is checked once:
// the cache keeps the pass, and a rebuild says so instead of checking again.
TEST(LayerCheckAtBuild, AnOverrunningLayerIsRefusedAndAPassIsCached) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("layer_check_at_build");
  fs::remove_all(dir / "cache");
  setenv("FSDPGEN_CACHE_DIR", (dir / "cache").c_str(), 1);
  auto checks_cached = [&] {
    int n = 0;
    if (fs::exists(dir / "cache" / "layers"))
      for (const fs::directory_entry& e : fs::directory_iterator(dir / "cache" / "layers"))
        n += e.path().filename().string().rfind("check-", 0) == 0;
    return n;
  };

  fs::remove(dir / "train");
  CmdResult r = build_gelu_with(dir, gelu_saved_too_small(gelu_header()), "");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  memory: forward wrote past the end of 'pre' (a Saved array, \"d_ff "
                       "/ 2\" = 64 per token x 6 tokens = 384 elements"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("at gelu_mlp.h:35 in GeluMlp<"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fsdpgen: error: custom layer mlp = GeluMlp(d_model = 32, d_ff = 128) from "
                       "gelu_mlp.h fails check-layer's checks at the spec's shapes (above); "
                       "`fsdpgen check-layer gelu_mlp.h GeluMlp --width 32 --hyper d_model=32 "
                       "d_ff=128` runs them again; --no-layer-check builds without them"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(dir / "train")) << "a refused layer leaves no binary";
  EXPECT_EQ(checks_cached(), 0) << "a failure is not kept";

  r = build_gelu_with(dir, gelu_saved_too_small(gelu_header()), "--no-layer-check");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("check-layer"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir / "train"));

  r = build_gelu_with(dir, gelu_header(), "");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("fsdpgen: custom layer mlp = GeluMlp(d_model = 32, d_ff = 128) from "
                       "gelu_mlp.h: check-layer's checks passed ("),
            std::string::npos)
      << r.out;
  EXPECT_EQ(checks_cached(), 1);
  r = build_gelu_with(dir, gelu_header(), "");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("gelu_mlp.h: check-layer's checks passed before (cached in "),
            std::string::npos)
      << r.out;
  EXPECT_EQ(checks_cached(), 1);
  unsetenv("FSDPGEN_CACHE_DIR");
}

TEST(BuildCheck, CpuTargetOnly) {
  const fs::path dir = e2e_dir("check_build_cuda");
  std::ofstream(dir / "e2e.fsdp") << E2eConfig{}.spec();
  const CmdResult r = run_command(fmt::format(
      "cd {} && {} e2e.fsdp -o train --target cuda --check 2>&1", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_NE(r.out.find("--check builds for the CPU target only"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "train"));
}

}  // namespace
}  // namespace fsdpgen::test
