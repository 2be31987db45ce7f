// Straggler: per-kind op times from a step's op times, and the choice of the
// busiest rank, the median rank and the op kind where the first lost most,
// on hand-made times.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/train/straggler.h"

namespace {

constexpr int64_t kMs = 1'000'000;  // ns

// AG u0 (all-gather stream), F u0, FREE u0, B u0 (compute), RS u0.
const program_op kOps[] = {
    {.id = 0, .stream = stream_id::allgather, .kind = op_kind::all_gather},
    {.id = 1, .stream = stream_id::compute, .kind = op_kind::forward},
    {.id = 2, .stream = stream_id::compute, .kind = op_kind::free},
    {.id = 3, .stream = stream_id::compute, .kind = op_kind::backward},
    {.id = 4, .stream = stream_id::reducescatter, .kind = op_kind::reduce_scatter},
};

program five_ops() {
  program p{};
  p.ops = kOps;
  p.op_count = 5;
  return p;
}

int k(op_kind kind) {
  return static_cast<int>(kind);
}

TEST(Straggler, TimesPerKindSumTheOpsAndTheStepSpansThem) {
  const std::vector<int64_t> start = {1 * kMs, 3 * kMs, 7 * kMs, 7 * kMs, 12 * kMs};
  const std::vector<int64_t> end = {3 * kMs, 7 * kMs, 7 * kMs, 12 * kMs, 15 * kMs};
  const straggler_times t = straggler_times_of(five_ops(), start, end);
  EXPECT_EQ(t.step_ns, 14 * kMs);  // 1 ms to 15 ms
  EXPECT_EQ(t.kind_ns[k(op_kind::all_gather)], 2 * kMs);
  EXPECT_EQ(t.kind_ns[k(op_kind::forward)], 4 * kMs);
  EXPECT_EQ(t.kind_ns[k(op_kind::backward)], 5 * kMs);
  EXPECT_EQ(t.kind_ns[k(op_kind::reduce_scatter)], 3 * kMs);
  // Busy: forward and backward; the collectives' time holds waits.
  EXPECT_EQ(straggler_busy_ns(t), 9 * kMs);
}

// A rank's step: forward, backward, optimizer ms, and the ms its
// all-gathers and reduce-scatters took (waits included).
straggler_times rank(int64_t f, int64_t b, int64_t opt, int64_t ag, int64_t rs) {
  straggler_times t;
  t.kind_ns[k(op_kind::forward)] = f * kMs;
  t.kind_ns[k(op_kind::backward)] = b * kMs;
  t.kind_ns[k(op_kind::optimizer_step)] = opt * kMs;
  t.kind_ns[k(op_kind::all_gather)] = ag * kMs;
  t.kind_ns[k(op_kind::reduce_scatter)] = rs * kMs;
  t.step_ns = (f + b + opt + ag + rs) * kMs;
  return t;
}

// Rank 2 spends 30 ms more in backward than the others, who wait that long in
// their reduce-scatters: rank 2 is named, with backward, although every
// rank's step lasts about as long and the others' reduce-scatters lost more.
TEST(Straggler, NamesTheBusiestRankAndWhereItLostAgainstTheMedian) {
  const std::vector<straggler_times> ranks = {rank(20, 40, 5, 3, 32), rank(21, 40, 5, 3, 31),
                                              rank(20, 70, 5, 3, 2), rank(22, 41, 5, 3, 30)};
  const straggler_report r = straggler_find(ranks);
  EXPECT_EQ(r.rank, 2);
  EXPECT_DOUBLE_EQ(r.busy_s, 0.095);
  // Busy 65, 66, 95, 68: busiest first 95, 68, 66, 65; the median is rank 1's 66.
  EXPECT_EQ(r.median_rank, 1);
  EXPECT_DOUBLE_EQ(r.median_busy_s, 0.066);
  EXPECT_DOUBLE_EQ(r.step_s, 0.1);
  EXPECT_EQ(r.kind, op_kind::backward);
  EXPECT_DOUBLE_EQ(r.lost_s, 0.030);
  EXPECT_TRUE(straggler_notable(r));
}

// Of two ranks the median is the less busy one; equal ranks name the lower
// one and nothing notable.
TEST(Straggler, TwoRanksAndTies) {
  const straggler_report two = straggler_find({rank(10, 20, 1, 300, 2), rank(310, 20, 1, 2, 1)});
  EXPECT_EQ(two.rank, 1);
  EXPECT_EQ(two.median_rank, 0);
  EXPECT_EQ(two.kind, op_kind::forward);
  EXPECT_DOUBLE_EQ(two.lost_s, 0.3);
  const straggler_report tie = straggler_find({rank(10, 20, 1, 3, 2), rank(10, 20, 1, 3, 2)});
  EXPECT_EQ(tie.rank, 0);
  EXPECT_DOUBLE_EQ(tie.lost_s, 0);
  EXPECT_FALSE(straggler_notable(tie));
  // 10% is the line: 5% more is not notable.
  EXPECT_FALSE(straggler_notable(straggler_find({rank(100, 0, 0, 0, 0), rank(105, 0, 0, 0, 0)})));
  EXPECT_TRUE(straggler_notable(straggler_find({rank(100, 0, 0, 0, 0), rank(115, 0, 0, 0, 0)})));
}

}  // namespace
