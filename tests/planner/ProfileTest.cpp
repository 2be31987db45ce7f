// Hardware profile files (runtime/profile/profile.h): the JSON round trip, every
// schema error located by file and field, requests with zero times, and
// loading and saving files.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/profile/profile.h"

namespace fsdpgen::profile {
namespace {

Profile sample() {
  Profile p;
  p.written_by = "fsdpgen test";
  p.created = "2026-11-23T22:00:00Z";
  p.sweep = "specs/tiny.fsdp";
  p.device = {"cpu", "Test CPU", "cpu", 2, int64_t{24} << 30};
  Compute one;
  one.ranks_per_node = 1;
  one.threads_per_rank = 2;
  one.op_overhead_s = 2e-5;
  one.layers.push_back({"gpt2", "block", "forward", "fp32", "", {{"B", 8}, {"C", 128}}, 0.01, 9});
  one.layers.push_back(
      {"gpt2", "block", "backward", "bf16", "fp32", {{"B", 8}, {"C", 128}}, 0.02, 7});
  one.elementwise.push_back({"adamw", "fp32", 1 << 20, 0.004, 11});
  one.muon_ns.push_back({128, 384, 5, "bf16", 0.0015, 6});
  Compute two = one;
  two.ranks_per_node = 2;
  two.threads_per_rank = 1;
  p.compute = {one, two};
  p.collectives.push_back({"all_gather", "fp32", 2, 1, 4096, 3e-5, 20});
  p.copies.push_back({"h2d", 1 << 20, 1e-4, 20});
  return p;
}

// The sample's JSON with `edit` applied, parsed: the error message.
template <class Edit>
std::string error_after(Edit edit, bool measured = true) {
  nlohmann::json j = nlohmann::json::parse(to_json(sample()));
  edit(j);
  try {
    from_json(j.dump(), "p.json", measured);
  } catch (const ProfileError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Profile, RoundTripKeepsEveryField) {
  const Profile p = sample();
  const std::string text = to_json(p);
  const Profile q = from_json(text, "p.json");
  EXPECT_EQ(to_json(q), text);
  EXPECT_EQ(q.device.name, "Test CPU");
  EXPECT_EQ(q.device.memory_bytes, int64_t{24} << 30);
  ASSERT_EQ(q.compute.size(), 2u);
  EXPECT_EQ(q.compute[1].ranks_per_node, 2);
  EXPECT_EQ(q.compute[1].threads_per_rank, 1);
  EXPECT_DOUBLE_EQ(q.compute[0].op_overhead_s, 2e-5);
  ASSERT_EQ(q.compute[0].layers.size(), 2u);
  EXPECT_EQ(q.compute[0].layers[1].grad_dtype, "fp32");
  EXPECT_EQ(q.compute[0].layers[1].dims.at("C"), 128);
  EXPECT_DOUBLE_EQ(q.compute[0].layers[1].seconds, 0.02);
  EXPECT_EQ(q.compute[0].elementwise[0].elems, 1 << 20);
  EXPECT_EQ(q.collectives[0].bytes, 4096);
  EXPECT_EQ(q.copies[0].op, "h2d");
}

TEST(Profile, SchemaErrorsNameTheFileAndTheField) {
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["layers"][1]["seconds"] = 0; }),
            "p.json: compute[0].layers[1].seconds: must be a positive number of seconds, not 0");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][1]["layers"][0]["seconds"] = -1.5; }),
            "p.json: compute[1].layers[0].seconds: must be a positive number of seconds, not "
            "-1.5");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["layers"][0]["pass"] = "sideways"; }),
            "p.json: compute[0].layers[0].pass: 'sideways' is not one of 'forward', "
            "'recompute', 'backward'");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["layers"][1].erase("grad_dtype"); }),
            "p.json: compute[0].layers[1].grad_dtype: missing");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["layers"][0]["dims"]["C"] = "wide"; }),
            "p.json: compute[0].layers[0].dims.C: must be an integer");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["elementwise"][0]["elems"] = 0; }),
            "p.json: compute[0].elementwise[0].elems: must be at least 1, not 0");
  EXPECT_EQ(error_after([](auto& j) { j["collectives"][0]["nodes"] = 3; }),
            "p.json: collectives[0].nodes: more nodes than its 2 ranks");
  EXPECT_EQ(error_after([](auto& j) { j["collectives"][0]["op"] = "broadcast"; }),
            "p.json: collectives[0].op: 'broadcast' is not one of 'all_gather', "
            "'reduce_scatter', 'all_reduce', 'send_recv'");
  EXPECT_EQ(error_after([](auto& j) { j["copies"][0]["bytes"] = 1.5; }),
            "p.json: copies[0].bytes: must be an integer");
  EXPECT_EQ(error_after([](auto& j) { j["device"]["kind"] = "tpu"; }),
            "p.json: device.kind: 'tpu' is not one of 'cpu', 'cuda'");
  EXPECT_EQ(error_after([](auto& j) { j["device"].erase("base"); }),
            "p.json: device.base: missing");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][1]["ranks_per_node"] = 1; }),
            "p.json: compute[1].ranks_per_node: compute sections must be in ascending "
            "ranks_per_node");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["layers"][0]["secnods"] = 1; }),
            "p.json: compute[0].layers[0]: unknown field 'secnods' (known: 'family', 'layer', "
            "'pass', 'dtype', 'grad_dtype', 'dims', 'seconds', 'runs')");
  EXPECT_EQ(error_after([](auto& j) { j["collectives"] = nlohmann::json::object(); }),
            "p.json: collectives: must be an array");
}

TEST(Profile, MuonNewtonSchulzEntriesRoundTripAndAreChecked) {
  const Profile q = from_json(to_json(sample()), "p.json");
  ASSERT_EQ(q.compute[1].muon_ns.size(), 1u);
  const MuonNsTime& m = q.compute[1].muon_ns[0];
  EXPECT_EQ(m.rows, 128);
  EXPECT_EQ(m.cols, 384);
  EXPECT_EQ(m.ns_steps, 5);
  EXPECT_EQ(m.ns_dtype, "bf16");
  EXPECT_DOUBLE_EQ(m.seconds, 0.0015);
  EXPECT_EQ(m.runs, 6);
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["rows"] = 0; }),
            "p.json: compute[0].muon_ns[0].rows: must be at least 1, not 0");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][1]["muon_ns"][0]["cols"] = 2.5; }),
            "p.json: compute[1].muon_ns[0].cols: must be an integer");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["ns_steps"] = 100; }),
            "p.json: compute[0].muon_ns[0].ns_steps: must be at most 99, not 100");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["ns_steps"] = -1; }),
            "p.json: compute[0].muon_ns[0].ns_steps: must be at least 0, not -1");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["ns_dtype"] = "fp16"; }),
            "p.json: compute[0].muon_ns[0].ns_dtype: 'fp16' is not one of 'fp32', 'bf16'");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["seconds"] = 0; }),
            "p.json: compute[0].muon_ns[0].seconds: must be a positive number of seconds, not 0");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0].erase("ns_steps"); }),
            "p.json: compute[0].muon_ns[0].ns_steps: missing");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["steps"] = 5; }),
            "p.json: compute[0].muon_ns[0]: unknown field 'steps' (known: 'rows', 'cols', "
            "'ns_steps', 'ns_dtype', 'seconds', 'runs')");
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"] = 1; }),
            "p.json: compute[0].muon_ns: must be an array");
  // In a request the time is still zero.
  EXPECT_EQ(error_after([](auto& j) { j["compute"][0]["muon_ns"][0]["seconds"] = 0; }, false),
            "(no error)");
}

// Profiles of specs without Muon (and those written before it) have no
// muon_ns: absent reads as none, and none is not written.
TEST(Profile, MuonNewtonSchulzEntriesAreOptional) {
  nlohmann::json j = nlohmann::json::parse(to_json(sample()));
  for (auto& c : j["compute"])
    c.erase("muon_ns");
  const Profile q = from_json(j.dump(), "p.json");
  EXPECT_TRUE(q.compute[0].muon_ns.empty());
  EXPECT_EQ(to_json(q).find("muon_ns"), std::string::npos);
  EXPECT_NE(to_json(sample()).find("\"muon_ns\""), std::string::npos);
}

// Muon's point-to-point exchanges are the send_recv collective: it round-trips
// with the others and is checked like them.
TEST(Profile, SendRecvCollectivesRoundTripAndAreChecked) {
  Profile p = sample();
  p.collectives.push_back({"send_recv", "bf16", 4, 1, 81664, 2.5e-5, 9});
  const Profile q = from_json(to_json(p), "p.json");
  ASSERT_EQ(q.collectives.size(), p.collectives.size());
  const CollectiveTime& c = q.collectives.back();
  EXPECT_EQ(c.op, "send_recv");
  EXPECT_EQ(c.dtype, "bf16");
  EXPECT_EQ(c.ranks, 4);
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.bytes, 81664);
  EXPECT_DOUBLE_EQ(c.seconds, 2.5e-5);
  EXPECT_EQ(c.runs, 9);
  EXPECT_EQ(error_after([](auto& j) { j["collectives"][0]["op"] = "send"; }),
            "p.json: collectives[0].op: 'send' is not one of 'all_gather', "
            "'reduce_scatter', 'all_reduce', 'send_recv'");
  EXPECT_EQ(error_after([](auto& j) {
              j["collectives"][0]["op"] = "send_recv";
              j["collectives"][0]["bytes"] = 0;
            }),
            "p.json: collectives[0].bytes: must be at least 1, not 0");
}

// A CPU profile's contention entries (a collective beside a layer pass)
// round-trip, are optional (absent reads as none and none is not written),
// and are checked like the entries they hold, located inside them.
TEST(Profile, ContentionEntriesRoundTripAndAreChecked) {
  Profile p = sample();
  EXPECT_EQ(to_json(p).find("contention"), std::string::npos);
  p.contention.push_back({{"all_gather", "fp32", 2, 1, 4096, 9e-5, 40},
                          {"gpt2", "block", "backward", "bf16", "fp32", {{"B", 8}}, 0.025, 6}});
  const Profile q = from_json(to_json(p), "p.json");
  ASSERT_EQ(q.contention.size(), 1u);
  EXPECT_EQ(to_json(q), to_json(p));
  EXPECT_EQ(q.contention[0].collective.op, "all_gather");
  EXPECT_DOUBLE_EQ(q.contention[0].collective.seconds, 9e-5);
  EXPECT_EQ(q.contention[0].collective.runs, 40);
  EXPECT_EQ(q.contention[0].layer.grad_dtype, "fp32");
  EXPECT_DOUBLE_EQ(q.contention[0].layer.seconds, 0.025);
  nlohmann::json j = nlohmann::json::parse(to_json(p));
  auto error = [&](auto edit) {
    nlohmann::json k = j;
    edit(k);
    try {
      from_json(k.dump(), "p.json");
    } catch (const ProfileError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error([](auto& k) { k["contention"][0]["layer"]["seconds"] = 0; }),
            "p.json: contention[0].layer.seconds: must be a positive number of seconds, not 0");
  EXPECT_EQ(error([](auto& k) { k["contention"][0]["collective"]["op"] = "send_recv"; }),
            "p.json: contention[0].collective.op: a contention entry times a collective, not "
            "send_recv");
  EXPECT_EQ(error([](auto& k) { k["contention"][0]["beside"] = 1; }),
            "p.json: contention[0]: unknown field 'beside' (known: 'collective', 'layer')");
  EXPECT_EQ(error([](auto& k) { k["contention"][0].erase("layer"); }),
            "p.json: contention[0].layer: missing");
  EXPECT_EQ(error([](auto& k) {
              k["device"]["kind"] = "cuda";
              k["device"]["base"] = "h100-sxm";
            }),
            "p.json: contention: measured on the CPU runtime only, but device.kind is 'cuda'");
}

TEST(Profile, ForeignFilesAndOtherVersionsAreRefused) {
  EXPECT_EQ(error_after([](auto& j) { j["version"] = 2; }),
            "p.json: version: this profile has schema version 2; this fsdpgen reads version 1 "
            "only: run `fsdpgen calibrate` again to measure this machine");
  EXPECT_EQ(error_after([](auto& j) { j.erase("format"); }),
            "p.json: not an fsdpgen hardware profile (no \"format\": \"fsdpgen-profile\")");
  try {
    from_json("{\"traceEvents\": [", "trace.json");
    FAIL() << "no error";
  } catch (const ProfileError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("trace.json: not JSON: ", 0), 0u) << e.what();
  }
}

TEST(Profile, RequestsHoldZeroTimesProfilesDoNot) {
  Profile r = sample();
  for (Compute& c : r.compute)
    for (LayerTime& l : c.layers)
      l.seconds = 0, l.runs = 0;
  EXPECT_NO_THROW(from_json(to_json(r), "request.json", false));
  EXPECT_THROW(from_json(to_json(r), "request.json", true), ProfileError);
}

TEST(Profile, SaveAndLoadFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("fsdpgen-profile-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  save(sample(), path);
  EXPECT_EQ(to_json(load(path)), to_json(sample()));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  try {
    load((dir / "none.json").string());
    FAIL() << "no error";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("none.json: no such profile"), std::string::npos)
        << e.what();
  }
  try {
    save(sample(), (dir / "no-dir" / "p.json").string());
    FAIL() << "no error";
  } catch (const ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("no-dir/p.json: cannot write it"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fsdpgen::profile
