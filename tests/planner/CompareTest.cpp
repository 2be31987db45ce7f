// fsdpgen compare's core (codegen/planner/Compare.h) on hand-made traces whose
// tables are computed by hand: step totals, exposed communication, per op
// kind and per op in order of difference; every mismatch named; the merged
// trace's tracks.
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "codegen/planner/Compare.h"

namespace fsdpgen {
namespace {

using nlohmann::json;

struct Ev {
  int id;
  const char* label;
  const char* kind;
  int tid;  // 0 compute, 1 allgather, 2 reducescatter
  double start_ms, end_ms;
  int64_t payload = 0;
};

// A trace in the form fsdpgen writes: per process, thread names, then ops.
std::string trace(const std::vector<std::vector<Ev>>& ranks, int64_t world,
                  const std::string& model = "toy") {
  json events = json::array();
  const char* names[] = {"compute", "allgather", "reducescatter"};
  for (size_t pid = 0; pid < ranks.size(); ++pid) {
    for (int tid = 0; tid < 3; ++tid)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", pid},
                        {"tid", tid},
                        {"args", {{"name", names[tid]}}}});
    for (const Ev& e : ranks[pid])
      events.push_back({{"name", e.label},
                        {"cat", e.kind},
                        {"ph", "X"},
                        {"ts", e.start_ms * 1e3},
                        {"dur", (e.end_ms - e.start_ms) * 1e3},
                        {"pid", pid},
                        {"tid", e.tid},
                        {"args",
                         {{"op", e.id},
                          {"kind", e.kind},
                          {"unit", 1},
                          {"micro_batch", 0},
                          {"group_size", 2},
                          {"payload_bytes", e.payload}}}});
  }
  return json{{"traceEvents", events}, {"otherData", {{"model", model}, {"world", world}}}}.dump();
}

// Predicted: AG 0..2, F 2..10, RS 10..11. Measured rank 0: AG 0..3, F 3..13,
// RS 13..15; rank 1 one ms later throughout.
const std::vector<Ev> kPredicted = {{0, "AG u1 mb0", "AG", 1, 0, 2, 4096},
                                    {1, "F u1 s1 mb0", "F", 0, 2, 10},
                                    {2, "RS u1 mb0", "RS", 2, 10, 11, 4096}};
const std::vector<Ev> kRank0 = {{0, "AG u1 mb0", "AG", 1, 0, 3, 4096},
                                {1, "F u1 s1 mb0", "F", 0, 3, 13},
                                {2, "RS u1 mb0", "RS", 2, 13, 15, 4096}};
const std::vector<Ev> kRank1 = {{0, "AG u1 mb0", "AG", 1, 1, 4, 4096},
                                {1, "F u1 s1 mb0", "F", 0, 4, 14},
                                {2, "RS u1 mb0", "RS", 2, 14, 16, 4096}};

StepTrace predicted() {
  return read_step_trace(trace({kPredicted}, 2), "p.json");
}
StepTrace measured() {
  return read_step_trace(trace({kRank0, kRank1}, 2), "m.json");
}

bool has(const std::string& text, const std::string& s) {
  return text.find(s) != std::string::npos;
}

TEST(Compare, TablesComputedByHand) {
  const std::string r = compare_report(predicted(), measured(), {0, 20});
  // Step 11 vs 15; rank 1 ends at 16: the mean is 15.5.
  EXPECT_TRUE(has(r, "step                                11.000        15.000    1.36x")) << r;
  EXPECT_TRUE(has(r, "step, mean over ranks               11.000        15.500    1.41x")) << r;
  // Exposed: AG and RS run while no compute does: 2 + 1 predicted, 3 + 2 measured.
  EXPECT_TRUE(has(r, "exposed communication                3.000         5.000    1.67x")) << r;
  EXPECT_TRUE(has(r, "busy compute                         8.000        10.000    1.25x")) << r;
  EXPECT_TRUE(has(r, "AG (1)                               2.000         3.000    1.50x")) << r;
  EXPECT_TRUE(has(r, "F (1)                                8.000        10.000    1.25x")) << r;
  EXPECT_TRUE(has(r, "RS (1)                               1.000         2.000    2.00x")) << r;
  // Largest difference first: F (2 ms), then AG and RS (1 ms each) in op order.
  const size_t f = r.find("    1 F u1 s1 mb0"), ag = r.find("    0 AG u1 mb0"),
               rs = r.find("    2 RS u1 mb0");
  ASSERT_NE(f, std::string::npos) << r;
  EXPECT_LT(f, ag);
  EXPECT_LT(ag, rs);
  const std::string top1 = compare_report(predicted(), measured(), {1, 1});
  EXPECT_TRUE(has(top1, "(rank 1 of 2)")) << top1;
  EXPECT_TRUE(has(top1, "(top 1)")) << top1;
  EXPECT_FALSE(has(top1, "    0 AG u1 mb0")) << top1;
}

// Rank 1 against rank 0 of one measured trace: the same tables, a rank a column.
TEST(Compare, TwoRanksOfOneTraceSideBySide) {
  const std::string r = compare_ranks_report(measured(), 0, 1, 20);
  EXPECT_TRUE(has(r, "measured m.json: rank 1 against rank 0 (of 2)")) << r;
  EXPECT_TRUE(has(r, "step                             rank 0 ms     rank 1 ms    ratio")) << r;
  // Rank 1 ends at 16, rank 0 at 15; each op lasts as long on both.
  EXPECT_TRUE(has(r, "step                                15.000        16.000    1.07x")) << r;
  EXPECT_FALSE(has(r, "mean over ranks")) << r;
  EXPECT_TRUE(has(r, "F (1)                               10.000        10.000    1.00x")) << r;
  EXPECT_TRUE(has(r, "    1 F u1 s1 mb0      compute               10.000        10.000    1.00x"))
      << r;
  auto error = [](const StepTrace& m, int a, int b) {
    try {
      compare_ranks_report(m, a, b, 20);
    } catch (const CompareError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error(measured(), 0, 2), "--ranks 0,2: m.json holds ranks 0 to 1, not 2");
  EXPECT_EQ(error(measured(), 1, 1), "--ranks 1,1: name two different ranks");
  EXPECT_EQ(error(read_step_trace(trace({kRank0}, 1), "one.json"), 0, 1),
            "one.json holds one rank: --ranks compares two ranks of a measured trace of several "
            "(`./train --trace` under mpirun)");
  std::vector<Ev> other = kRank1;
  other[1].label = "F u2 s2 mb0";
  EXPECT_EQ(error(read_step_trace(trace({kRank0, other}, 2), "m.json"), 0, 1),
            "m.json: op 1 is 'F u1 s1 mb0' on rank 0, 'F u2 s2 mb0' on rank 1: not one schedule");
}

std::string error_of(const StepTrace& p, const StepTrace& m, int rank = 0) {
  try {
    compare_report(p, m, {rank, 20});
  } catch (const CompareError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Compare, MismatchedTracesNameTheDifference) {
  std::vector<Ev> fewer = kRank0;
  fewer.pop_back();
  EXPECT_EQ(error_of(predicted(), read_step_trace(trace({fewer}, 2), "m.json")),
            "p.json has 3 ops, m.json (rank 0) 2: another spec, world or micro-batch?");
  std::vector<Ev> other = kRank0;
  other[0].label = "AG u2 mb0";
  EXPECT_EQ(error_of(predicted(), read_step_trace(trace({other}, 2), "m.json")),
            "op 0 differs: p.json has 'AG u1 mb0' (4096 bytes over 2), m.json (rank 0) 'AG u2 "
            "mb0' (4096 bytes over 2): another spec, world or micro-batch?");
  other = kRank0;
  other[2].payload = 8192;
  EXPECT_TRUE(has(error_of(predicted(), read_step_trace(trace({other}, 2), "m.json")),
                  "'RS u1 mb0' (8192 bytes over 2)"));
  EXPECT_EQ(error_of(predicted(), read_step_trace(trace({kRank0}, 1), "m.json")),
            "the traces are of other worlds: p.json plans 2 ranks, m.json measured 1");
  EXPECT_EQ(error_of(predicted(), read_step_trace(trace({kRank0}, 2, "big"), "m.json")),
            "the traces are of other models: p.json is toy, m.json is big");
  EXPECT_EQ(error_of(measured(), predicted()),
            "m.json: a predicted trace holds one process, this one 2 (predicted and measured "
            "swapped?)");
  EXPECT_EQ(error_of(predicted(), measured(), 2), "--rank 2: m.json holds ranks 0 to 1");
}

TEST(Compare, FilesThatAreNoTracesNameTheFile) {
  auto error = [](const std::string& text) {
    try {
      read_step_trace(text, "t.json");
    } catch (const CompareError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(error("{\"traceEvents\": ["), "t.json: not JSON");
  EXPECT_TRUE(has(error("{\"format\": \"fsdpgen-profile\"}"), "t.json: not a trace"));
  EXPECT_EQ(error("{\"traceEvents\": []}"), "t.json: the trace holds no ops");
  json j = json::parse(trace({kPredicted}, 2));
  j["traceEvents"][3]["args"].erase("payload_bytes");
  EXPECT_EQ(error(j.dump()), "t.json: op 0: args.payload_bytes is missing or not an integer");
}

// Events of unexpected types, ids beyond 2^31 and negative durations are
// errors naming the event, never an abort (they were nlohmann type_errors).
TEST(Compare, HostileTracesAreErrorsNamingTheEvent) {
  auto error = [](const json& j) {
    try {
      read_step_trace(j.dump(), "t.json");
    } catch (const CompareError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const json good = json::parse(trace({kPredicted}, 2));
  auto with = [&](auto change) {
    json j = good;
    change(j["traceEvents"]);
    return error(j);
  };
  // Events 0-2 are thread names, 3-5 the ops.
  EXPECT_EQ(with([](json& e) { e[4] = 7; }), "t.json: event 4 is not a JSON object");
  EXPECT_EQ(with([](json& e) { e[3]["pid"] = "0"; }),
            "t.json: event 3: \"pid\" is not a whole number from 0 to 2147483647");
  EXPECT_EQ(with([](json& e) { e[3]["ts"] = "0"; }),
            "t.json: event 3: \"ts\" is missing or not a finite number");
  EXPECT_EQ(with([](json& e) { e[3]["ts"] = nullptr; }),
            "t.json: event 3: \"ts\" is missing or not a finite number");
  EXPECT_EQ(with([](json& e) { e[3]["dur"] = -1.0; }),
            "t.json: event 3: \"dur\" is missing or not a finite, non-negative number");
  EXPECT_EQ(with([](json& e) { e[0].erase("args"); }),
            "t.json: event 0: a thread_name without args");
  EXPECT_EQ(with([](json& e) { e[0]["args"]["name"] = 3; }),
            "t.json: event 0: \"name\" is not a string");
  EXPECT_EQ(with([](json& e) { e[3]["ph"] = 1; }), "t.json: event 3: \"ph\" is not a string");
  EXPECT_EQ(with([](json& e) { e[3]["args"]["op"] = int64_t{1} << 32; }),
            "t.json: event 3: \"op\" is not a whole number from 0 to 2147483647");
  EXPECT_EQ(error(json::array()),
            "t.json: not a trace (no traceEvents array): write one with "
            "`fsdpgen schedule --format trace` or `./train --trace`");
}

TEST(Compare, MergedTraceHoldsBothTracksOfEachStream) {
  const json j = json::parse(merged_trace(predicted(), measured(), 1));
  std::map<int, std::string> tracks;
  int ops = 0;
  for (const json& e : j["traceEvents"]) {
    if (e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
    if (e["ph"] == "X") ++ops;
  }
  EXPECT_EQ(ops, 6);  // three ops, predicted and measured
  // Streams in first-use order (allgather first), predicted above measured.
  EXPECT_EQ(tracks[0], "allgather (predicted)");
  EXPECT_EQ(tracks[1], "allgather (measured, rank 1)");
  EXPECT_EQ(tracks[2], "compute (predicted)");
  EXPECT_EQ(tracks[3], "compute (measured, rank 1)");
}

}  // namespace
}  // namespace fsdpgen
