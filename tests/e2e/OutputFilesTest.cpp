// Outputs that are not regular files: --metrics, --save, --trace and
// --trace-data given a FIFO (whose open would wait for a reader forever),
// /dev/zero (which keeps nothing) or a directory stop every rank that writes
// it with the flag, the path and what is there, before the first step.
// --save names one file with a .safetensors path (the FIFO and the directory
// are given so named) and else a model directory, which /dev/zero cannot be.
#include <sys/stat.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

TEST(OutputFiles, FifosDevicesAndDirectoriesAreRefusedBeforeTheFirstStep) {
  const E2eConfig two_ranks;
  const std::filesystem::path bin = shared_binary(e2e_dir("output_files"), two_ranks.spec());
  const std::filesystem::path dir = bin.parent_path();
  const std::filesystem::path fifo = dir / "fifo";
  for (const char* suffix : {"", ".safetensors"}) {
    std::filesystem::remove_all(fifo.string() + suffix);
    ASSERT_EQ(mkfifo((fifo.string() + suffix).c_str(), 0644), 0);
    std::filesystem::create_directories(dir / (std::string("adir") + suffix));
  }
  allow_mpi_as_root();
  struct Output {
    std::string flag;
    std::vector<int> ranks;  // the ranks that write it, each of which names it
  };
  for (const Output& out : {Output{"--metrics", {0}}, Output{"--save", {0, 1}},
                            Output{"--trace", {0}}, Output{"--trace-data", {0, 1}}})
    for (auto [path, what] :
         {std::pair<std::string, std::string>{fifo.string(), "it is a FIFO, not a regular file"},
          {"/dev/zero", "it is a character device, not a regular file"},
          {(dir / "adir").string(), "it is a directory"}}) {
      const bool save = out.flag == "--save", device = path == "/dev/zero";
      if (save && !device) path += ".safetensors";
      const std::string refusal =
          save && device ? "cannot write a model directory there: it is a character device, not "
                           "a directory"
                         : "cannot write there: " + what;
      const CmdResult r = run_command(fmt::format("cd {} && timeout 60 {} --steps 2 {} {}",
                                                  dir.string(), launch(2, bin), out.flag, path));
      SCOPED_TRACE(out.flag + " " + path);
      EXPECT_EQ(r.status, 1) << (r.status == 124 ? "timed out: a rank waited\n" : "") << r.out;
      // An error of every rank is said once, as one process would; rank 0's alone names it.
      const std::string said =
          out.ranks.size() == 2 ? "error: " : fmt::format("rank {}: error: ", out.ranks[0]);
      EXPECT_NE(r.out.find(fmt::format("{}{} {}: {}", said, out.flag, path, refusal)),
                std::string::npos)
          << r.out;
      EXPECT_EQ(r.out.find("step 1/2"), std::string::npos) << "trained first:\n" << r.out;
    }
  for (const char* suffix : {"", ".safetensors"})
    std::filesystem::remove(fifo.string() + suffix);
}

}  // namespace
}  // namespace fsdpgen::test
