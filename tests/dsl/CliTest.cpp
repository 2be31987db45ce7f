// The fsdpgen command line: exit statuses and where output goes.
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/common/Command.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

std::string spec(const std::string& name) {
  return (source_dir() / "specs" / name).string();
}

TEST(Cli, CheckSucceedsOnEveryExampleSpec) {
  for (const auto& f : files_in("specs", ".fsdp")) {
    CmdResult r = run("check " + f.string());
    EXPECT_EQ(r.status, 0) << f << "\n" << r.out;
    EXPECT_NE(r.out.find(": ok: model"), std::string::npos) << r.out;
  }
}

TEST(Cli, DumpPrintsTheResolvedSpec) {
  CmdResult r = run("check --dump " + spec("tiny.fsdp"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("model tiny {"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sharding = full_shard"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("accumulate { micro_batches = 1  reduce = every }"), std::string::npos)
      << r.out;
}

TEST(Cli, BadSpecExitsOneWithLocatedErrors) {
  std::string path = testing::TempDir() + "/bad.fsdp";
  std::ofstream(path) << "model t { vocab = 256 context = 64 width = 64 heads = 4 layers = 2 }\n"
                         "parallel { sharding = ful_shard }\n";
  CmdResult r = run("check " + path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(
      r.out.find(path +
                 ":2:23: error: unknown sharding strategy 'ful_shard'; did you mean 'full_shard'?"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 error generated."), std::string::npos) << r.out;
}

TEST(Cli, MissingFileAndDirectoryAreErrors) {
  CmdResult r = run("check /nonexistent/x.fsdp");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("cannot read spec file '/nonexistent/x.fsdp'"), std::string::npos) << r.out;
  r = run("check " + testing::TempDir());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
}

// A spec path naming a FIFO or a device is refused before any read could
// wait or never end (with `timeout` around the command, a read that
// blocks fails as status 124).
TEST(Cli, FifoAndDeviceSpecsAreRefusedWithoutReading) {
  const std::string fifo = testing::TempDir() + "/spec.fifo";
  std::remove(fifo.c_str());
  ASSERT_EQ(run_command("mkfifo " + fifo).status, 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    CmdResult r = run_command("timeout 20 " + std::string(FSDPGEN_BIN) + " check " + path);
    EXPECT_EQ(r.status, 1) << path << "\n" << r.out;
    EXPECT_NE(r.out.find("cannot read spec file '" + path + "': not a regular file"),
              std::string::npos)
        << r.out;
  }
  std::remove(fifo.c_str());
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").status, 2);
  EXPECT_EQ(run("check").status, 2);
  EXPECT_EQ(run("frobnicate x").status, 2);
  CmdResult r = run("check --bogus " + spec("tiny.fsdp"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.out.find("--bogus"), std::string::npos) << r.out;
  EXPECT_EQ(run("--help").status, 0);
}

}  // namespace
}  // namespace fsdpgen::test
