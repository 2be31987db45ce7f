// RankErrors: the report rank 0 prints when ranks fail at one agreement
// point (runtime/rank_errors.h): every rank's one message said once, as one
// process would say it; messages that differ each once with their ranks.
#include <gtest/gtest.h>

#include "runtime/rank_errors.h"

namespace {

TEST(RankErrors, OneMessageOfEveryRankIsSaidOnceWithoutRanks) {
  EXPECT_EQ(rank_errors_report({"bad flag", "bad flag", "bad flag", "bad flag"}),
            "error: bad flag\n");
  EXPECT_EQ(rank_errors_report({"bad flag"}), "error: bad flag\n");
}

TEST(RankErrors, NoMessageIsNoReport) {
  EXPECT_EQ(rank_errors_report({"", "", ""}), "");
  EXPECT_EQ(rank_errors_report({}), "");
}

TEST(RankErrors, MessagesThatDifferAreEachSaidOnceWithTheirRanks) {
  EXPECT_EQ(rank_errors_report({"a missing", "b missing", "a missing", ""}),
            "ranks 0, 2: error: a missing\nrank 1: error: b missing\n");
  EXPECT_EQ(rank_errors_report({"", "only here"}), "rank 1: error: only here\n");
  EXPECT_EQ(rank_errors_report({"", "late", "early", "late"}),
            "ranks 1, 3: error: late\nrank 2: error: early\n");
}

TEST(RankErrors, RunsOfRanksAreRanges) {
  EXPECT_EQ(rank_errors_report({"x", "x", "x", "", "x", "x", "", "x"}),
            "ranks 0-2, 4-5, 7: error: x\n");
  EXPECT_EQ(rank_errors_report({"x", "x", "x", "y"}), "ranks 0-2: error: x\nrank 3: error: y\n");
}

}  // namespace
