// Watchdog: the stall report composed from every rank's record (which rank
// holds the others up, in which op and step, where the others wait), the
// records' layout, the GPU's marks merged into a record and --inject-stall's
// parsing.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/train/watchdog.h"

namespace {

constexpr int64_t kNow = 1'000'000'000'000;  // wall-clock ns
constexpr int64_t kSecond = 1'000'000'000;

// Four ops: AG u0 (all-gather stream), F u0 (compute), AG u1, F u1.
const program_op kOps[] = {
    {.id = 0, .stream = stream_id::allgather, .kind = op_kind::all_gather, .label = "AG u0 mb0"},
    {.id = 1, .stream = stream_id::compute, .kind = op_kind::forward, .label = "F u0 s0 mb0"},
    {.id = 2, .stream = stream_id::allgather, .kind = op_kind::all_gather, .label = "AG u1 mb0"},
    {.id = 3, .stream = stream_id::compute, .kind = op_kind::forward, .label = "F u1 s1 mb0"},
};

program four_ops() {
  program p{};
  p.ops = kOps;
  p.op_count = 4;
  return p;
}

// A rank at 0-based step 1040 whose heartbeat is `beat_ago` old, in `op` on
// `stream` for `for_s` seconds (op -1: none).
watch_view rank_in(int64_t rank, int op, stream_id stream, double for_s,
                   watch_liveness l = watch_liveness::answering, int64_t beat_ago = 0) {
  watch_view v;
  v.liveness = l;
  v.record.magic = kWatchRecordMagic;
  v.record.rank = rank;
  v.record.pid = 1000 + rank;
  std::snprintf(v.record.host, sizeof v.record.host, "node1");
  v.record.step = 1040;
  v.record.heartbeat_ns = kNow - beat_ago;
  const int s = static_cast<int>(stream);
  v.record.op[s] = op;
  v.record.entered_ns[s] = kNow - static_cast<int64_t>(for_s * 1e9);
  return v;
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

TEST(Watchdog, NamesTheRankInAComputeOpAndWhereTheOthersWait) {
  const program p = four_ops();
  std::vector<watch_view> ranks;
  for (int64_t r = 0; r < 8; ++r)
    ranks.push_back(r == 3 ? rank_in(r, 1, stream_id::compute, 94)
                           : rank_in(r, 2, stream_id::allgather, 93.5));
  const std::string report = watch_report(p, ranks, kNow, {.timeout_s = 60});
  EXPECT_EQ(first_line(report),
            "stall at step 1041: rank 3 has been in op 1 (F u0 s0 mb0: forward, compute stream) "
            "for 94.0 s; ranks 0-2 and 4-7 wait in op 2 (AG u1 mb0: all-gather, all-gather stream) "
            "for rank 3 (stall timeout 60 s)")
      << report;
  EXPECT_NE(report.find("  rank 3 (pid 1003 on node1): step 1041, answering; in op 1"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("exit code 3 (stalled)"), std::string::npos) << report;
}

// An op predicted to take long is allowed kWatchPredictedFactor times its
// prediction where that exceeds the timeout, and the report says both.
TEST(Watchdog, AnOpPredictedLongGetsTwentyTimesItsPrediction) {
  program_op ops[4];
  std::copy(std::begin(kOps), std::end(kOps), ops);
  ops[1].predicted_s = 0.0031;  // 20x: 62 ms, under the 60 s timeout
  ops[3].predicted_s = 4.5;     // 20x: 90 s
  program p = four_ops();
  p.ops = ops;
  EXPECT_EQ(watch_op_limit_ns(p, 1, {.timeout_s = 60}), 60 * kSecond);
  EXPECT_EQ(watch_op_limit_ns(p, 3, {.timeout_s = 60}), 90 * kSecond);
  EXPECT_EQ(watch_op_limit_ns(p, 0, {.timeout_s = 60}), 60 * kSecond);  // none predicted
  EXPECT_EQ(watch_op_limit_ns(p, kWatchLossAllReduce, {.timeout_s = 60}), 60 * kSecond);
  std::vector<watch_view> ranks = {rank_in(0, 1, stream_id::compute, 94),
                                   rank_in(1, 2, stream_id::allgather, 93)};
  EXPECT_EQ(first_line(watch_report(p, ranks, kNow, {.timeout_s = 60})),
            "stall at step 1041: rank 0 has been in op 1 (F u0 s0 mb0: forward, compute stream) "
            "for 94.0 s (predicted 3.1 ms); rank 1 waits in op 2 (AG u1 mb0: all-gather, "
            "all-gather stream) for rank 0 (stall timeout 60 s)");
  ranks = {rank_in(0, 3, stream_id::compute, 95), rank_in(1, 2, stream_id::allgather, 94)};
  EXPECT_EQ(first_line(watch_report(p, ranks, kNow, {.timeout_s = 60})),
            "stall at step 1041: rank 0 has been in op 3 (F u1 s1 mb0: forward, compute stream) "
            "for 95.0 s (predicted 4.5 s); rank 1 waits in op 2 (AG u1 mb0: all-gather, "
            "all-gather stream) for rank 0 (stall limit 90.0 s: 20 x the op's predicted time)");
}

// A checkpoint's write and agreement are allowed the caller's checkpoint
// bytes at kWatchCheckpointBytesPerS where that exceeds the timeout; the
// step's ops are not.
TEST(Watchdog, ACheckpointGetsItsBytesAtTheFileSystemsRate) {
  const program p = four_ops();
  const watch_limits big{.timeout_s = 60, .checkpoint_bytes = 6'000'000'000};  // 120 s at 50 MB/s
  EXPECT_EQ(watch_op_limit_ns(p, kWatchCheckpointWrite, big), 120 * kSecond);
  EXPECT_EQ(watch_op_limit_ns(p, kWatchCheckpointAgree, big), 120 * kSecond);
  EXPECT_EQ(watch_op_limit_ns(p, 1, big), 60 * kSecond);
  EXPECT_EQ(watch_op_limit_ns(p, kWatchLossAllReduce, big), 60 * kSecond);
  const watch_limits small{.timeout_s = 60, .checkpoint_bytes = 1'000'000'000};  // 20 s
  EXPECT_EQ(watch_op_limit_ns(p, kWatchCheckpointWrite, small), 60 * kSecond);
  // The report says where a checkpoint's longer limit comes from: its size, not a prediction.
  const std::vector<watch_view> ranks = {
      rank_in(0, kWatchCheckpointWrite, stream_id::compute, 121),
      rank_in(1, kWatchCheckpointAgree, stream_id::compute, 120)};
  const std::string line = first_line(watch_report(p, ranks, kNow, big));
  EXPECT_NE(line.find(" (stall limit 120 s: this rank's 6.00 GB of checkpoint at 50 MB/s)"),
            std::string::npos)
      << line;
}

TEST(Watchdog, AComputeOpOutranksAnOlderCollective) {
  // Rank 0 entered its all-gather before rank 1 began the forward it sleeps
  // in: the forward is what the all-gather waits for.
  const program p = four_ops();
  const std::vector<watch_view> ranks = {rank_in(0, 2, stream_id::allgather, 5.2),
                                         rank_in(1, 3, stream_id::compute, 5.0)};
  EXPECT_EQ(first_line(watch_report(p, ranks, kNow, {.timeout_s = 2}))
                .rfind("stall at step 1041: rank 1 has been in op 3 (F u1", 0),
            0u);
}

TEST(Watchdog, ARankBetweenOpsHoldsUpRanksInCollectives) {
  const program p = four_ops();
  std::vector<watch_view> ranks = {rank_in(0, 0, stream_id::allgather, 3),
                                   rank_in(1, -1, stream_id::compute, 0),
                                   rank_in(2, kWatchLossAllReduce, stream_id::compute, 3)};
  const std::string line = first_line(watch_report(p, ranks, kNow, {.timeout_s = 2}));
  EXPECT_EQ(line.rfind("stall at step 1041: rank 1 has been running no op of the step; ", 0), 0u)
      << line;
  EXPECT_NE(line.find("rank 0 waits in op 0 (AG u0 mb0: all-gather, all-gather stream)"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("rank 2 waits in the loss all-reduce after the step's ops"),
            std::string::npos)
      << line;
  // The straggler gather is a collective outside the schedule too.
  ranks[2] = rank_in(2, kWatchStragglerGather, stream_id::compute, 3);
  const std::string gather = first_line(watch_report(p, ranks, kNow, {.timeout_s = 2}));
  EXPECT_EQ(gather.rfind("stall at step 1041: rank 1 has been running no op of the step; ", 0), 0u)
      << gather;
  EXPECT_NE(gather.find("rank 2 waits in the straggler gather after the step's ops"),
            std::string::npos)
      << gather;
}

TEST(Watchdog, ASilentRankIsNamedAsStoppedAnswering) {
  const program p = four_ops();
  std::vector<watch_view> ranks = {
      rank_in(0, 2, stream_id::allgather, 4), rank_in(1, 2, stream_id::allgather, 4),
      rank_in(2, 1, stream_id::compute, 12, watch_liveness::silent, 7 * kSecond),
      rank_in(3, 2, stream_id::allgather, 4)};
  ranks[2].record.step = 9;
  const std::string report = watch_report(p, ranks, kNow, {.timeout_s = 2});
  EXPECT_EQ(first_line(report),
            "stall at step 1041: rank 2 stopped answering 7.0 s ago (a stopped or wedged process), "
            "last in op 1 (F u0 s0 mb0: forward, compute stream) for 12.0 s; ranks 0-1 and 3 "
            "wait in op 2 (AG u1 mb0: all-gather, all-gather stream) for rank 2 (stall timeout "
            "2 s)")
      << report;
  // The step is where the ranks that answer are; the silent one's record is older.
  EXPECT_NE(
      report.find("  rank 2 (pid 1002 on node1): step 10, stopped answering 7.0 s ago; in op 1"),
      std::string::npos)
      << report;
}

TEST(Watchdog, ADeadRankIsNamedAsDeadNotStalled) {
  const program p = four_ops();
  // Rank 0 is silent too (its heartbeat stale), but the dead one comes first.
  const std::vector<watch_view> ranks = {
      rank_in(0, 2, stream_id::allgather, 4, watch_liveness::silent, 5 * kSecond),
      rank_in(1, 3, stream_id::compute, 4, watch_liveness::dead, 5 * kSecond)};
  const std::string line = first_line(watch_report(p, ranks, kNow, {.timeout_s = 2}));
  EXPECT_EQ(line.rfind("stall at step 1041: rank 1 (pid 1001) is dead (its process is gone), last "
                       "in op 3 (F u1 s1 mb0: forward, compute stream)",
                       0),
            0u)
      << line;
  EXPECT_EQ(line.find("stalled"), std::string::npos) << line;
}

TEST(Watchdog, NamesValidationAndRanksWithoutRecords) {
  const program p = four_ops();
  std::vector<watch_view> ranks = {rank_in(0, 1, stream_id::compute, 70), watch_view{}};
  ranks[0].record.validation_pass = 2;
  ranks[1].record.rank = 1;
  const std::string report = watch_report(p, ranks, kNow, {.timeout_s = 60});
  EXPECT_EQ(
      first_line(report).rfind("stall at the validation after step 1041 (pass 3): rank 0 ", 0), 0u)
      << report;
  EXPECT_NE(report.find("  rank 1: no record"), std::string::npos) << report;
}

// The GPU's marks (a GPU stream's op, written by the GPU, runtime/cuda/executor.h)
// as the monitor merges them into its record at each tick: a mark entered at
// the tick it first shows, the same op in another run (the next step) entered
// anew, -1 nothing; the host's own mark of the stream kept where it is older.
TEST(Watchdog, GpuMarksEnterAtTheTickTheyChangeOrTheRunDoes) {
  const int c = static_cast<int>(stream_id::compute), ag = static_cast<int>(stream_id::allgather);
  int32_t marks[kStreamCount] = {-1, -1, -1, -1, -1, -1};
  watch_gpu_view v;
  // The record's host-side marks as publish() leaves them: none running.
  auto look = [&](int64_t run, int64_t tick) {
    watch_record r;
    watch_merge_gpu_marks(v, marks, run, tick * kSecond, kNow + tick * kSecond, r);
    return r;
  };
  marks[c] = 1;
  watch_record r = look(5, 0);
  EXPECT_EQ(r.op[c], 1);
  EXPECT_EQ(r.entered_ns[c], kNow);
  EXPECT_EQ(r.op[ag], -1);
  r = look(5, 3);  // F u0 runs on: still entered at tick 0
  EXPECT_EQ(r.op[c], 1);
  EXPECT_EQ(r.entered_ns[c], kNow);
  r = look(6, 4);  // F u0 again, but of the next step: another instance
  EXPECT_EQ(r.op[c], 1);
  EXPECT_EQ(r.entered_ns[c], kNow + 4 * kSecond);
  marks[c] = 3;
  marks[ag] = 2;
  r = look(6, 5);
  EXPECT_EQ(r.op[c], 3);
  EXPECT_EQ(r.entered_ns[c], kNow + 5 * kSecond);
  EXPECT_EQ(r.op[ag], 2);
  marks[c] = -1;
  r = look(6, 6);
  EXPECT_EQ(r.op[c], -1) << "a stream between ops (or waiting for another's) runs none";
  EXPECT_EQ(r.op[ag], 2);
  EXPECT_EQ(r.entered_ns[ag], kNow + 5 * kSecond);

  // The host's mark of a stream (a host-synchronous collective) against the GPU's.
  watch_record host;
  host.op[ag] = 0;
  host.entered_ns[ag] = kNow + 5 * kSecond + kSecond / 2;  // after the GPU's op 2 showed
  watch_merge_gpu_marks(v, marks, 6, 7 * kSecond, kNow + 7 * kSecond, host);
  EXPECT_EQ(host.op[ag], 2) << "the GPU's op has run longer";
  host.op[ag] = 0;
  host.entered_ns[ag] = kNow;  // before it
  watch_merge_gpu_marks(v, marks, 6, 8 * kSecond, kNow + 8 * kSecond, host);
  EXPECT_EQ(host.op[ag], 0) << "the host's op has run longer";
  EXPECT_EQ(host.entered_ns[ag], kNow);
}

TEST(Watchdog, ParsesInjectedStall) {
  watch_injected_stall s;
  EXPECT_EQ(watch_parse_injected_stall("3:1041:2.5", 8, s), "");
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.step, 1041);
  EXPECT_EQ(s.seconds, 2.5);
  for (const char* bad : {"3:1041", "3:1041:0", "-1:2:3", "1:2:3x", "a:b:c", "1:2:inf"})
    EXPECT_NE(watch_parse_injected_stall(bad, 8, s).find("expected RANK:STEP:SECONDS"),
              std::string::npos)
        << bad;
  EXPECT_EQ(watch_parse_injected_stall("8:1:1", 8, s), "rank 8 is not below the world of 8 ranks");
}

}  // namespace
