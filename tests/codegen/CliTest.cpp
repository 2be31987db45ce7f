// fsdpgen schedule, plan and emit from the command line: outputs, formats,
// overrides, targets and errors.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/common/Command.h"

namespace {

using fsdpgen::test::CmdResult;
using fsdpgen::test::run;

std::string spec(const std::string& name) {
  return std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + name;
}

bool has(const CmdResult& r, const std::string& s) {
  return r.out.find(s) != std::string::npos;
}

TEST(CliSchedule, TextListsEveryStream) {
  CmdResult r = run("schedule " + spec("tiny.fsdp"));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s :
       {"stream compute", "stream allgather", "stream reducescatter", "AG u1", "RS u4", "OPT u0"})
    EXPECT_TRUE(has(r, s)) << s << "\n" << r.out.substr(0, 2000);
}

TEST(CliSchedule, JsonAndTraceParse) {
  std::string dir = testing::TempDir();
  ASSERT_EQ(
      run("schedule " + spec("gpt2-124m.fsdp") + " --format json -o " + dir + "/s.json").status, 0);
  std::ifstream js(dir + "/s.json");
  nlohmann::json j = nlohmann::json::parse(js);
  EXPECT_EQ(j["world"], 8);
  EXPECT_EQ(j["units"].size(), 13u);
  EXPECT_GT(j["ops"].size(), 50u);
  ASSERT_EQ(run("schedule " + spec("tiny.fsdp") + " --format trace --gpu cpu -o " + dir + "/t.json")
                .status,
            0);
  std::ifstream ts(dir + "/t.json");
  nlohmann::json t = nlohmann::json::parse(ts);
  std::set<int> tids;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") tids.insert(e["tid"].get<int>());
  EXPECT_GE(tids.size(), 3u);  // compute, all-gather, reduce-scatter (and all-reduce)
}

TEST(CliSchedule, WorldOverrideIsChecked) {
  CmdResult r = run("schedule " + spec("gpt2-1.5b.fsdp") + " --world 12");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "must divide world (12)")) << r.out;
  r = run("schedule " + spec("tiny.fsdp") + " --world 0");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r, "--world must be between 1")) << r.out;
  EXPECT_EQ(run("schedule " + spec("tiny.fsdp") + " --world 4").status, 0);
}

TEST(CliPlan, ReportsMemoryFitAndTime) {
  CmdResult r = run("plan " + spec("gpt-175b.fsdp") + " --world 512 --gpu a100-80g");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* s :
       {"174601101312 parameters", "optimizer_state", "fits: yes", "MFU", "exposed", "tokens/s"})
    EXPECT_TRUE(has(r, s)) << s << "\n" << r.out;
}

TEST(CliPlan, SaysWhatWouldFit) {
  // GPT-2 1.5B without recompute on one 40 GB device does not fit; smaller
  // micro-batches, recompute or more ranks do.
  CmdResult r =
      run("plan " + spec("gpt2-1.5b.fsdp") + " --world 1 --micro-batch 64 --gpu a100-40g");
  EXPECT_EQ(r.status, 1)
      << r.out;  // world 1 with a shard group of 8: the spec's hybrid layout needs 8 ranks
  r = run("plan " + spec("gpt2-350m.fsdp") + " --micro-batch 64 --gpu a100-40g");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "fits: NO")) << r.out;
  EXPECT_TRUE(has(r, "changes that fit")) << r.out;
}

TEST(CliPlan, UnknownHardwareNamesTheChoices) {
  CmdResult r = run("plan " + spec("tiny.fsdp") + " --gpu a100");
  EXPECT_EQ(r.status, 2) << r.out;
  EXPECT_TRUE(has(r, "a100-40g")) << r.out;
}

// The CUDA target plans for --gpu and writes calls into runtime/cuda/; the
// CPU target writes the CPU runtime's. Both name their target in the header.
TEST(CliEmit, TargetsWriteTheirRuntimesCalls) {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/cli-emit";
  CmdResult cpu = run("emit " + spec("tiny.fsdp") + " --target cpu -o " + dir + "/cpu");
  ASSERT_EQ(cpu.status, 0) << cpu.out;
  CmdResult gpu =
      run("emit " + spec("tiny.fsdp") + " --target cuda --gpu h200 -o " + dir + "/cuda");
  ASSERT_EQ(gpu.status, 0) << gpu.out;
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string c = read(dir + "/cpu/train.cpp"), g = read(dir + "/cuda/train.cpp");
  EXPECT_NE(c.find("gpt2_block_forward<param_t>("), std::string::npos);
  EXPECT_EQ(c.find("cuda_"), std::string::npos);
  EXPECT_NE(c.find("train_main(kProgram"), std::string::npos);
  EXPECT_NE(g.find("cuda_gpt2_block_forward<param_t>("), std::string::npos);
  EXPECT_NE(g.find("cuda_comm_all_gather(cuda_op_comm(c, stream_id::allgather"), std::string::npos);
  EXPECT_NE(g.find("cuda_train_main(kProgram"), std::string::npos);
  EXPECT_NE(g.find("--gpu h200"), std::string::npos);
}

TEST(CliEmit, TargetErrors) {
  CmdResult bad = run("emit " + spec("tiny.fsdp") + " --target tpu -o /tmp/x");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_TRUE(has(bad, "--target")) << bad.out;
  CmdResult cpu_gpu = run("emit " + spec("tiny.fsdp") + " --target cuda --gpu cpu -o /tmp/x");
  EXPECT_EQ(cpu_gpu.status, 1) << cpu_gpu.out;
  EXPECT_TRUE(has(cpu_gpu, "--gpu cpu is not one")) << cpu_gpu.out;
}

}  // namespace
