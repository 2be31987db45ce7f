// CalibrateTest: fsdpgen-calibrate run under mpirun on 2 ranks as `fsdpgen
// calibrate` runs it: a hand-written request with tiny's shapes comes back
// measured, entry for entry; more work measures longer; Muon's Newton-Schulz
// and its exchanges (send_recv) are measured; bad requests fail on every rank
// with one located message.
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/profile/profile.h"
#include "tests/common/Command.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

const std::string kRequest = std::string(FSDPGEN_SOURCE_DIR) + "/tests/calibrate/tiny_request.json";
constexpr const char* kPrefix = "fsdpgen-calibrate: error: ";

fs::path work_dir(const std::string& name) {
  const fs::path dir = fs::path(CALIBRATE_WORK) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The binary on `ranks` ranks (mpirun even for one, as a user's launch would).
CmdResult calibrate(int ranks, const std::string& args) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  return run_command(fmt::format("timeout 120 mpirun -n {} --oversubscribe --bind-to none {} {}",
                                 ranks, CALIBRATE_BIN, args));
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// The entry fields that are not measured, as text, to compare request and result.
std::string identity(const profile::Profile& p) {
  profile::Profile q = p;
  for (profile::Compute& c : q.compute) {
    c.threads_per_rank = 1;
    c.op_overhead_s = 0;
    for (profile::LayerTime& l : c.layers)
      l.seconds = 0, l.runs = 0;
    for (profile::ElementwiseTime& e : c.elementwise)
      e.seconds = 0, e.runs = 0;
    for (profile::MuonNsTime& m : c.muon_ns)
      m.seconds = 0, m.runs = 0;
  }
  for (profile::CollectiveTime& c : q.collectives)
    c.seconds = 0, c.runs = 0;
  for (profile::CopyTime& c : q.copies)
    c.seconds = 0, c.runs = 0;
  for (profile::ContentionTime& c : q.contention) {
    c.collective.seconds = 0, c.collective.runs = 0;
    c.layer.seconds = 0, c.layer.runs = 0;
  }
  q.device = {};
  q.written_by = q.created = "";
  return profile::to_json(q);
}

TEST(Calibrate, MeasuresEveryEntryOfTheRequestInItsOrder) {
  const fs::path out = work_dir("tiny") / "profile.json";
  const CmdResult r = calibrate(
      2, fmt::format("{} -o {} --min-runs 2 --min-seconds 0 --rounds 1", kRequest, out.string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const profile::Profile request = profile::load(kRequest, false);
  const profile::Profile p = profile::load(out.string());  // measured: every time > 0
  EXPECT_EQ(identity(p), identity(request));

  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  ASSERT_EQ(p.compute.size(), 2u);
  for (const profile::Compute& c : p.compute) {
    EXPECT_EQ(c.threads_per_rank, std::max<int64_t>(1, cores / c.ranks_per_node));
    EXPECT_GT(c.op_overhead_s, 0);
    for (const profile::LayerTime& l : c.layers)
      EXPECT_TRUE(l.seconds > 0 && l.runs >= 2) << l.layer << " " << l.pass;
    for (const profile::ElementwiseTime& e : c.elementwise)
      EXPECT_TRUE(e.seconds > 0 && e.runs >= 2) << e.op;
  }
  for (const profile::CollectiveTime& c : p.collectives)
    EXPECT_TRUE(c.seconds > 0 && c.runs >= 2) << c.op;
  for (const profile::CopyTime& c : p.copies)
    EXPECT_TRUE(c.seconds > 0 && c.runs >= 2) << c.op;

  EXPECT_EQ(p.device.kind, "cpu");
  EXPECT_FALSE(p.device.name.empty());
  EXPECT_EQ(p.device.base, request.device.base);
  EXPECT_EQ(p.device.cores, cores);
  EXPECT_GT(p.device.memory_bytes, int64_t{1} << 20);
  EXPECT_EQ(p.written_by.rfind("fsdpgen ", 0), 0u) << p.written_by;
  EXPECT_TRUE(std::regex_match(p.created, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << p.created;
  // One progress line per entry, on rank 0 only, and the closing line.
  EXPECT_EQ(count_of(r.out, " runs)"), 30u) << r.out;
  EXPECT_NE(r.out.find("[30/30] d2h 1048576 bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out.string()), std::string::npos) << r.out;
}

profile::LayerTime block_backward(int64_t batch) {
  profile::LayerTime l;
  l.family = "gpt2";
  l.layer = "block";
  l.pass = "backward";
  l.dtype = l.grad_dtype = "fp32";
  l.dims = {{"B", batch}, {"T", 128}, {"C", 128},  {"H", 4},
            {"F", 512},   {"V", 256}, {"Vp", 256}, {"flash", 0}};
  return l;
}

profile::CollectiveTime all_gather(int64_t bytes) {
  profile::CollectiveTime c;
  c.op = "all_gather";
  c.dtype = "fp32";
  c.bytes = bytes;
  return c;
}

// A request of this test's own entries on the CPU: its compute section
// (ranks_per_node, threads 1) and any collectives the caller adds.
profile::Profile request_of(profile::Compute compute) {
  profile::Profile request;
  request.sweep = "CalibrateTest";
  request.device = {"cpu", "", "cpu", 1, 1};
  request.compute.push_back(std::move(compute));
  return request;
}

// `request` written to dir/request.json and measured on 2 ranks into
// dir/profile.json, each entry at least min_runs times.
CmdResult measure_request(const fs::path& dir, const profile::Profile& request, int min_runs) {
  profile::save(request, (dir / "request.json").string());
  return calibrate(
      2, fmt::format("{} -o {} --min-runs {} --min-seconds 0 --rounds 1",
                     (dir / "request.json").string(), (dir / "profile.json").string(), min_runs));
}

// 8x the tokens and 4096x the bytes take longer: the times are measured, not made up.
TEST(Calibrate, MoreWorkMeasuresLonger) {
  const fs::path dir = work_dir("scaling");
  profile::Profile request = request_of({1, 1, 0, {block_backward(4), block_backward(32)}, {}, {}});
  request.collectives = {all_gather(4096), all_gather(16 << 20)};
  const CmdResult r = measure_request(dir, request, 5);
  ASSERT_EQ(r.status, 0) << r.out;
  const profile::Profile p = profile::load((dir / "profile.json").string());
  EXPECT_GT(p.compute[0].layers[1].seconds, p.compute[0].layers[0].seconds) << r.out;
  EXPECT_GT(p.collectives[1].seconds, p.collectives[0].seconds) << r.out;
}

// Muon's owner step through the runtime's muon_orthogonalize on both ranks
// at once: every shape and ns_dtype measured, in request order; a larger matrix
// and more iterations take longer.
TEST(Calibrate, MeasuresMuonNewtonSchulz) {
  const fs::path dir = work_dir("muon");
  profile::Compute c{2, 1, 0, {}, {}, {}};
  c.muon_ns = {{64, 192, 5, "fp32", 0, 0},
               {256, 768, 5, "fp32", 0, 0},
               {64, 192, 20, "fp32", 0, 0},
               {192, 64, 5, "bf16", 0, 0}};
  const profile::Profile request = request_of(c);
  const CmdResult r = measure_request(dir, request, 3);
  ASSERT_EQ(r.status, 0) << r.out;
  const profile::Profile p = profile::load((dir / "profile.json").string());
  EXPECT_EQ(identity(p), identity(request));
  const std::vector<profile::MuonNsTime>& m = p.compute[0].muon_ns;
  ASSERT_EQ(m.size(), 4u);
  for (const profile::MuonNsTime& e : m)
    EXPECT_TRUE(e.seconds > 0 && e.runs >= 3) << e.rows << "x" << e.cols << " " << e.ns_dtype;
  EXPECT_GT(m[1].seconds, m[0].seconds) << r.out;  // 48x the FLOPs
  EXPECT_GT(m[2].seconds, m[0].seconds) << r.out;  // 4x the iterations
  EXPECT_NE(r.out.find("muon_ns (192, 64) 5 steps bf16, 2 ranks/node ... "), std::string::npos)
      << r.out;
}

// Muon's point-to-point exchange as a ring shift of MPI sends and receives on
// both ranks: every entry measured, in request order; 4096x the bytes take
// longer (3 us against milliseconds here: far beyond the noise), and longer
// than 16 MiB at 1 TB/s.
TEST(Calibrate, MeasuresSendRecv) {
  const fs::path dir = work_dir("send_recv");
  profile::Profile request = request_of({2, 1, 0, {}, {}, {}});
  request.collectives = {all_gather(4096), all_gather(16 << 20), all_gather(81664)};
  for (profile::CollectiveTime& c : request.collectives)
    c.op = "send_recv";
  request.collectives[2].dtype = "bf16";  // a label: the bytes are what moves
  const CmdResult r = measure_request(dir, request, 3);
  ASSERT_EQ(r.status, 0) << r.out;
  const profile::Profile p = profile::load((dir / "profile.json").string());
  EXPECT_EQ(identity(p), identity(request));
  ASSERT_EQ(p.collectives.size(), 3u);
  for (const profile::CollectiveTime& c : p.collectives)
    EXPECT_TRUE(c.seconds > 0 && c.runs >= 3) << c.bytes;
  EXPECT_GT(p.collectives[1].seconds, p.collectives[0].seconds) << r.out;
  // 16 MiB really moved: no machine's ranks exchange it at 1 TB/s.
  EXPECT_GT(p.collectives[1].seconds, (16 << 20) / 1e12) << r.out;
  EXPECT_NE(r.out.find("send_recv bf16 81664 bytes over 2 ranks on 1 node ... "), std::string::npos)
      << r.out;
}

// A collective beside a layer pass (a CPU profile's contention entry): the
// calls on a worker thread and the passes on the rank's own, both measured,
// the calls enough for at least two passes to end among them.
TEST(Calibrate, MeasuresCollectivesBesideALayerPass) {
  const fs::path dir = work_dir("contention");
  profile::Profile request = request_of({2, 1, 0, {block_backward(8)}, {}, {}});
  profile::CollectiveTime ag = all_gather(793088);
  request.collectives = {ag};
  request.contention = {{ag, block_backward(8)}};
  const CmdResult r = measure_request(dir, request, 2);
  ASSERT_EQ(r.status, 0) << r.out;
  const profile::Profile p = profile::load((dir / "profile.json").string());
  EXPECT_EQ(identity(p), identity(request));
  ASSERT_EQ(p.contention.size(), 1u);
  const profile::ContentionTime& c = p.contention[0];
  EXPECT_TRUE(c.collective.seconds > 0 && c.collective.runs >= 3) << r.out;
  EXPECT_TRUE(c.layer.seconds > 0 && c.layer.runs >= 2) << r.out;
  // The calls lasted the passes that were kept.
  EXPECT_GE(c.collective.seconds * c.collective.runs, c.layer.seconds * c.layer.runs) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\[4/4\] all_gather fp32 793088 bytes over 2 ranks on 1 node beside )"
                        R"(block backward gpt2 fp32/fp32 B=8 .* \.\.\. call [0-9.]+ [um]s )"
                        R"(\([0-9]+ runs\), pass [0-9.]+ ms \([0-9]+ runs\))")))
      << r.out;
}

// The request edited by `edit`, written to `name` (to_json writes any
// values; load is what checks them).
template <class Edit>
std::string edited_request(const std::string& name, Edit edit) {
  profile::Profile p = profile::load(kRequest, false);
  edit(p);
  const fs::path path = work_dir("bad") / name;
  profile::save(p, path.string());
  return path.string();
}

// Fails on every rank (a non-zero exit), with `message` printed once, by rank 0.
void expect_refused(const std::string& request, const std::string& message) {
  const std::string out = (fs::path(request).parent_path() / "never.json").string();
  const CmdResult r =
      calibrate(2, fmt::format("{} -o {} --min-runs 2 --min-seconds 0 --rounds 1", request, out));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count_of(r.out, kPrefix), 1u) << r.out;
  EXPECT_NE(r.out.find(kPrefix + message), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(out));
}

TEST(Calibrate, RefusesContentionWithoutItsComputeSection) {
  profile::Profile request = request_of({1, 1, 0, {block_backward(8)}, {}, {}});
  request.collectives = {all_gather(4096)};
  request.contention = {{all_gather(4096), block_backward(8)}};
  const fs::path dir = work_dir("bad");
  const std::string none = (dir / "contention_section.json").string();
  profile::save(request, none);
  expect_refused(none, none +
                           ": contention[0]: no compute section with ranks_per_node 2 (its "
                           "collective's ranks) to run its layer pass in");
}

TEST(Calibrate, RefusesMalformedJson) {
  const fs::path path = work_dir("bad") / "malformed.json";
  std::string text = profile::to_json(profile::load(kRequest, false));
  text.resize(text.size() / 2);
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  expect_refused(path.string(), path.string() + ": not JSON: ");
}

TEST(Calibrate, RefusesMoreRanksPerNodeThanItRuns) {
  const std::string path =
      edited_request("three.json", [](profile::Profile& p) { p.compute[1].ranks_per_node = 3; });
  expect_refused(path, path +
                           ": compute[1].ranks_per_node: 3 ranks per node, but the calibration "
                           "runs 2 on this node");
}

TEST(Calibrate, RefusesAnUnknownLayer) {
  const std::string path = edited_request(
      "layer.json", [](profile::Profile& p) { p.compute[0].layers[5].layer = "mlp"; });
  expect_refused(path, path +
                           ": compute[0].layers[5].layer: 'mlp' is not one of 'embed', "
                           "'block', 'head'");
}

TEST(Calibrate, RefusesAnUnknownFamily) {
  const std::string path = edited_request(
      "family.json", [](profile::Profile& p) { p.compute[0].layers[2].family = "gpt9"; });
  expect_refused(path, path +
                           ": compute[0].layers[2]: family: 'gpt9' is not one this "
                           "calibration measures (known: 'gpt2')");
}

TEST(Calibrate, RefusesADtypePairWithoutKernels) {
  const std::string path = edited_request("pair.json", [](profile::Profile& p) {
    p.compute[0].layers[11].grad_dtype = "fp16";  // block backward, bf16 params
  });
  expect_refused(path, path +
                           ": compute[0].layers[11]: dtype bf16 with grad_dtype fp16: the CPU "
                           "runtime has no kernels for that pair");
}

TEST(Calibrate, RefusesCollectivesOnMoreNodesThanTheirRanksSpan) {
  const std::string path =
      edited_request("nodes.json", [](profile::Profile& p) { p.collectives[2].nodes = 2; });
  expect_refused(path, path +
                           ": collectives[2]: nodes: its 2 ranks span 2 nodes, but the "
                           "calibration runs on 1 node with 2 or more ranks on each: run it on 2 "
                           "nodes or more with 1 ranks or more on each (srun -N 2 "
                           "--ntasks-per-node 1)");
}

TEST(Calibrate, RefusesCollectivesOnMoreRanksThanItRuns) {
  const std::string path =
      edited_request("ranks.json", [](profile::Profile& p) { p.collectives[3].ranks = 4; });
  expect_refused(path, path + ": collectives[3]: ranks: 4 ranks, but the calibration runs on 2");
}

TEST(Calibrate, RefusesAMuonDtypeWithoutNewtonSchulz) {
  const std::string path = edited_request("muon.json", [](profile::Profile& p) {
    p.compute[1].muon_ns = {{128, 128, 5, "fp16", 0, 0}};
  });
  expect_refused(path,
                 path + ": compute[1].muon_ns[0].ns_dtype: 'fp16' is not one of 'fp32', 'bf16'");
}

TEST(Calibrate, RefusesBadFlags) {
  const CmdResult r = calibrate(2, kRequest + " -o x.json --min-runs 0");
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_EQ(count_of(r.out, kPrefix), 1u) << r.out;
  EXPECT_NE(r.out.find(std::string(kPrefix) + "--min-runs: must be at least 1, not 0"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
