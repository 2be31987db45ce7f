// fsdpgen calibrate and --hardware from the command line: a short calibration
// of the tiny spec on two ranks whose profile then plans it (every op from
// measurements), one of a Muon spec, requests for srun, and every way a profile or the flags can
// be wrong.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/profile/profile.h"
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

std::string work_dir() {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/calibrate";
  std::filesystem::create_directories(dir);
  return dir;
}

// One quick calibration of tiny on the CPU for the whole suite (--target cpu:
// where a GPU is visible, calibrate measures it by default).
const std::string& tiny_profile() {
  static const std::string path = [] {
    const std::string p = work_dir() + "/tiny.json";
    std::filesystem::remove(p);
    CmdResult r = run(fmt::format("calibrate {} --target cpu --quick -o {}", spec("tiny.fsdp"), p));
    EXPECT_EQ(r.status, 0) << r.out;
    return p;
  }();
  return path;
}

TEST(CliCalibrate, TinysProfilePlansEveryOpFromMeasurements) {
  const fsdpgen::profile::Profile p = fsdpgen::profile::load(tiny_profile());
  EXPECT_EQ(p.device.kind, "cpu");
  EXPECT_EQ(p.device.base, "cpu");
  ASSERT_EQ(p.compute.size(), 2u);  // tiny runs 2 ranks on a node: measured alone and side by side
  EXPECT_EQ(p.compute[0].ranks_per_node, 1);
  EXPECT_EQ(p.compute[1].ranks_per_node, 2);
  for (const char* world : {"1", "2"}) {
    CmdResult r = run(
        fmt::format("plan {} --world {} --hardware {}", spec("tiny.fsdp"), world, tiny_profile()));
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r, "figures         hardware profile " + tiny_profile())) << r.out;
    EXPECT_TRUE(has(r, "ops measured")) << r.out;
    EXPECT_FALSE(has(r, "not in the profile")) << r.out;
    EXPECT_FALSE(has(r, "not this plan's")) << r.out;
  }
  CmdResult t = run(
      fmt::format("schedule {} --format trace --hardware {}", spec("tiny.fsdp"), tiny_profile()));
  ASSERT_EQ(t.status, 0) << t.out;
  const nlohmann::json trace = nlohmann::json::parse(t.out, nullptr, false);
  EXPECT_FALSE(trace.is_discarded()) << t.out.substr(0, 500);
}

// The count before `what` on the figures line ("37 ops measured"), 0 if absent.
int figures_count(const std::string& out, const std::string& what) {
  std::smatch m;
  return std::regex_search(out, m, std::regex("(\\d+) " + what)) ? std::stoi(m[1]) : 0;
}

// A Muon spec calibrated on 2 ranks: its matrices' Newton-Schulz is measured
// (muon_ns entries) and so are its exchanges (send_recv collectives), and plan
// prices its MUON_NS ops (one per block) and its MUON_GATHER and MUON_SCATTER
// ops (one each per block) from them, every op measured: without them, those
// ops fall back to the built-in figures.
TEST(CliCalibrate, MuonsNewtonSchulzIsMeasuredAndPlanned) {
  const std::string dir = work_dir();
  const std::string muon_spec = dir + "/muon.fsdp", profile = dir + "/muon.json";
  std::ofstream(muon_spec) << R"(
model muon { family = gpt2 vocab = 256 context = 64 width = 64 heads = 4 layers = 2 }
units { each block }
parallel { world = 2 sharding = full_shard precision { param = fp32 reduce = fp32 master = fp32 } }
train { optimizer = muon(lr = 0.02, ns_steps = 5) micro_batch = 4 steps = 10 data = synthetic(seed = 1) }
)";
  // The request says how many Newton-Schulz shapes it asks for (an AdamW
  // spec's, as in RequestOnlyWritesWhatToMeasureAndTheCommand, names none).
  CmdResult req = run(fmt::format("calibrate {} --request {}/muon-request.json", muon_spec, dir));
  ASSERT_EQ(req.status, 0) << req.out;
  EXPECT_TRUE(has(req, "copies, 4 Newton-Schulz shapes, 2 ranks per node)")) << req.out;
  std::filesystem::remove(profile);
  CmdResult r = run(fmt::format("calibrate {} --target cpu --quick -o {}", muon_spec, profile));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "muon_ns (64, 192) 5 steps fp32, 2 ranks/node")) << r.out;
  EXPECT_TRUE(has(r, "send_recv fp32 4096 bytes over 2 ranks on 1 node ... ")) << r.out;
  fsdpgen::profile::Profile p = fsdpgen::profile::load(profile);
  int send_recv = 0;
  for (const fsdpgen::profile::CollectiveTime& c : p.collectives)
    if (c.op == "send_recv") {
      ++send_recv;
      EXPECT_TRUE(c.seconds > 0 && c.runs >= 2) << c.bytes;
    }
  EXPECT_EQ(send_recv, 6);  // the exchanges' one payload and the 5 sizes of the sweep
  ASSERT_EQ(p.compute.size(), 2u);
  for (const fsdpgen::profile::Compute& c : p.compute) {
    EXPECT_EQ(c.muon_ns.size(), 4u);  // c_attn, attn.c_proj, c_fc, mlp.c_proj
    for (const fsdpgen::profile::MuonNsTime& m : c.muon_ns)
      EXPECT_TRUE(m.seconds > 0 && m.runs >= 2 && m.ns_steps == 5) << m.rows << "x" << m.cols;
  }
  CmdResult with = run(fmt::format("plan {} --hardware {}", muon_spec, profile));
  ASSERT_EQ(with.status, 0) << with.out;
  EXPECT_TRUE(has(with, "figures         hardware profile " + profile)) << with.out;
  EXPECT_FALSE(has(with, "not in the profile")) << with.out;

  // Without the send_recv entries the 4 exchanges take the built-in figures.
  fsdpgen::profile::Profile no_exchanges = p;
  std::erase_if(no_exchanges.collectives,
                [](const fsdpgen::profile::CollectiveTime& c) { return c.op == "send_recv"; });
  fsdpgen::profile::save(no_exchanges, dir + "/muon-no-exchanges.json");
  CmdResult builtin_exchanges =
      run(fmt::format("plan {} --hardware {}/muon-no-exchanges.json", muon_spec, dir));
  ASSERT_EQ(builtin_exchanges.status, 0) << builtin_exchanges.out;
  EXPECT_EQ(figures_count(builtin_exchanges.out, "not in the profile"),
            figures_count(with.out, "not in the profile") + 4)
      << with.out << builtin_exchanges.out;

  for (fsdpgen::profile::Compute& c : p.compute)
    c.muon_ns.clear();
  fsdpgen::profile::save(p, dir + "/muon-without.json");
  CmdResult without = run(fmt::format("plan {} --hardware {}/muon-without.json", muon_spec, dir));
  ASSERT_EQ(without.status, 0) << without.out;
  EXPECT_EQ(figures_count(with.out, "ops measured"), figures_count(without.out, "ops measured") + 2)
      << with.out << without.out;
  EXPECT_EQ(figures_count(without.out, "not in the profile"),
            figures_count(with.out, "not in the profile") + 2)
      << with.out << without.out;
}

TEST(CliCalibrate, AProfileFromAnotherRevisionIsNoted) {
  const std::string dir = work_dir();
  fsdpgen::profile::Profile p = fsdpgen::profile::load(tiny_profile());
  CmdResult same = run(fmt::format("plan {} --hardware {}", spec("tiny.fsdp"), tiny_profile()));
  EXPECT_FALSE(has(same, "was measured by")) << same.out;
  p.written_by = "fsdpgen 0000000";
  fsdpgen::profile::save(p, dir + "/old.json");
  CmdResult old = run(fmt::format("plan {} --hardware {}/old.json", spec("tiny.fsdp"), dir));
  EXPECT_EQ(old.status, 0) << old.out;
  EXPECT_TRUE(has(old, "old.json was measured by fsdpgen 0000000; this is fsdpgen ")) << old.out;
}

// A predicted step from the profile against one the binary measures: the
// table, the merged trace, and a trace of another world refused.
TEST(CliCalibrate, CompareAMeasuredStepWithItsPrediction) {
  const std::string dir = work_dir();
  ASSERT_EQ(
      run(fmt::format("{} --target cpu --world 1 -o {}/tiny1", spec("tiny.fsdp"), dir)).status, 0);
  CmdResult train = fsdpgen::test::run_command(fmt::format(
      "cd {0} && ./tiny1 --steps 20 --log-every 100 --trace {0}/measured.json --trace-step 19",
      dir));
  ASSERT_EQ(train.status, 0) << train.out;
  ASSERT_EQ(run(fmt::format("schedule {} --world 1 --hardware {} --format trace -o {}/p1.json",
                            spec("tiny.fsdp"), tiny_profile(), dir))
                .status,
            0);
  CmdResult r = run(fmt::format("compare {0}/p1.json {0}/measured.json -o {0}/merged.json", dir));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "hardware profile " + tiny_profile())) << r.out;
  for (const char* row : {"exposed communication", "per op kind (count)", "F (6)", "B (6)",
                          "OPT (5)", "largest difference first (top 20)"})
    EXPECT_TRUE(has(r, row)) << row << "\n" << r.out;
  std::ifstream merged(dir + "/merged.json");
  const nlohmann::json j = nlohmann::json::parse(merged, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  std::string names;
  for (const nlohmann::json& e : j["traceEvents"])
    if (e["name"] == "thread_name") names += e["args"]["name"].get<std::string>() + ";";
  EXPECT_NE(names.find("compute (predicted);compute (measured, rank 0);"), std::string::npos)
      << names;

  ASSERT_EQ(run(fmt::format("schedule {} --world 2 --hardware {} --format trace -o {}/p2.json",
                            spec("tiny.fsdp"), tiny_profile(), dir))
                .status,
            0);
  CmdResult other = run(fmt::format("compare {0}/p2.json {0}/measured.json", dir));
  EXPECT_EQ(other.status, 1) << other.out;
  EXPECT_TRUE(has(other, "the traces are of other worlds")) << other.out;
}

TEST(CliCalibrate, RequestOnlyWritesWhatToMeasureAndTheCommand) {
  const std::string req = work_dir() + "/req.json";
  CmdResult r = run(fmt::format("calibrate {} --ranks 2 --request {}", spec("tiny.fsdp"), req));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r, "srun -n 2 --mpi=pmix")) << r.out;
  EXPECT_FALSE(has(r, "Newton-Schulz")) << r.out;  // AdamW: none asked for
  const fsdpgen::profile::Profile p = fsdpgen::profile::load(req, /*measured=*/false);
  ASSERT_EQ(p.compute.size(), 2u);
  EXPECT_EQ(p.compute[0].layers.size(), 6u);  // embed, block, head: forward and backward
  EXPECT_FALSE(p.collectives.empty());

  // --micro-batch and --world replace the spec's, as for plan.
  CmdResult b = run(
      fmt::format("calibrate {} --world 1 --micro-batch 3 --request {}", spec("tiny.fsdp"), req));
  ASSERT_EQ(b.status, 0) << b.out;
  const fsdpgen::profile::Profile q = fsdpgen::profile::load(req, /*measured=*/false);
  ASSERT_EQ(q.compute.size(), 1u);  // one rank on the node
  EXPECT_EQ(q.compute[0].layers[0].dims.at("B"), 3);
  for (const fsdpgen::profile::CollectiveTime& c : q.collectives)
    ADD_FAILURE() << "world 1 has no collective, yet " << c.op;
  CmdResult bad =
      run(fmt::format("calibrate {} --micro-batch 0 --request {}", spec("tiny.fsdp"), req));
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_TRUE(has(bad, "--micro-batch")) << bad.out;
}

TEST(CliCalibrate, BadProfilesAndFlagsAreErrorsThatNameThem) {
  const std::string dir = work_dir();
  CmdResult missing = run(fmt::format("plan {} --hardware {}/none.json", spec("tiny.fsdp"), dir));
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_TRUE(has(missing, dir + "/none.json: no such profile")) << missing.out;

  nlohmann::json j =
      nlohmann::json::parse(fsdpgen::profile::to_json(fsdpgen::profile::load(tiny_profile())));
  j["compute"][0]["layers"][2]["seconds"] = "fast";
  std::ofstream(dir + "/bad.json") << j.dump();
  CmdResult bad = run(fmt::format("plan {} --hardware {}/bad.json", spec("tiny.fsdp"), dir));
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_TRUE(has(bad, dir + "/bad.json: compute[0].layers[2].seconds: must be a number"))
      << bad.out;

  j = nlohmann::json::parse(fsdpgen::profile::to_json(fsdpgen::profile::load(tiny_profile())));
  j["device"]["base"] = "h100-sxm";  // a CPU's measurements on a GPU's figures
  std::ofstream(dir + "/foreign.json") << j.dump();
  CmdResult foreign =
      run(fmt::format("plan {} --hardware {}/foreign.json", spec("tiny.fsdp"), dir));
  EXPECT_EQ(foreign.status, 2) << foreign.out;
  EXPECT_TRUE(has(foreign,
                  "device.base: 'h100-sxm' is a GPU, but the profile measured the cpu "
                  "runtime"))
      << foreign.out;

  CmdResult both =
      run(fmt::format("plan {} --hardware {} --gpu h100-sxm", spec("tiny.fsdp"), tiny_profile()));
  EXPECT_EQ(both.status, 2) << both.out;
  EXPECT_TRUE(has(both, "describes 'cpu'")) << both.out;
  EXPECT_TRUE(has(both, "not --gpu h100-sxm")) << both.out;

  CmdResult no_output = run("calibrate " + spec("tiny.fsdp"));
  EXPECT_EQ(no_output.status, 2) << no_output.out;
  EXPECT_TRUE(has(no_output, "give -o PROFILE")) << no_output.out;

  CmdResult llama =
      run(fmt::format("calibrate {} --target cpu -o {}/llama.json", spec("llama-1b.fsdp"), dir));
  EXPECT_EQ(llama.status, 1) << llama.out;
  EXPECT_TRUE(has(llama, "cannot run this spec")) << llama.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/llama.json"));
}

}  // namespace
