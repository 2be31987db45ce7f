// GuardTest: the loss-spike guard's window and limits (runtime/train/guard.h),
// against mean + z * standard deviation worked out by hand; the gate rule
// both machines share (optimizer_skips); the window as a checkpoint keeps it.
#include "runtime/train/guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime/optimizer_math.h"

namespace {

program_guard guard(double loss_z, double norm_z, int64_t window, int64_t max_skips = 3) {
  return {loss_z, norm_z, window, max_skips};
}

TEST(Guard, LimitsAreMeanPlusZDeviationsOnceTheWindowIsFull) {
  spike_guard g = guard_start(guard(2, 3, 4));
  const double inf = std::numeric_limits<double>::infinity();
  // Losses 1, 2, 3, 4: mean 2.5, population sd sqrt(1.25); norms all 10: sd
  // floored at 0.1% of the mean, 0.01.
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(guard_limits_of(g).loss, inf) << "the window is not full after " << i - 1;
    EXPECT_FALSE(guard_after_step(g, true, false, i, 10));
  }
  EXPECT_NEAR(guard_limits_of(g).loss, 2.5 + 2 * std::sqrt(1.25), 1e-12);
  EXPECT_NEAR(guard_limits_of(g).norm, 10 + 3 * 0.01, 1e-12);
  // The window slides: 2, 3, 4, 6 (mean 3.75, sd sqrt(2.1875)).
  guard_after_step(g, true, false, 6, 10);
  EXPECT_NEAR(guard_limits_of(g).loss, 3.75 + 2 * std::sqrt(2.1875), 1e-12);
}

TEST(Guard, ACheckThatIsOffHasNoLimitAndSpikesCountInARow) {
  spike_guard g = guard_start(guard(0, 6, 2, 2));
  guard_after_step(g, true, false, 5, 1);
  guard_after_step(g, true, false, 5, 2);
  EXPECT_EQ(guard_limits_of(g).loss, std::numeric_limits<double>::infinity());
  EXPECT_FALSE(guard_after_step(g, false, true, 500, 100));
  EXPECT_EQ(g.skips_in_row, 1);
  EXPECT_TRUE(guard_after_step(g, false, true, 500, 100)) << "max_skips 2 in a row";
  EXPECT_FALSE(guard_after_step(g, true, false, 5, 1));
  EXPECT_EQ(g.skips_in_row, 0) << "an applied step ends the run of spikes";
  EXPECT_FALSE(guard_enabled(guard_start(guard(0, 0, 100))));
}

TEST(Guard, TheWindowRoundTripsAndAShorterWindowKeepsTheNewest) {
  spike_guard g = guard_start(guard(3, 3, 3));
  for (int i = 1; i <= 5; ++i)
    guard_after_step(g, true, false, i, 10 * i);
  EXPECT_EQ(guard_window_losses(g), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(guard_window_norms(g), (std::vector<double>{30, 40, 50}));
  spike_guard back = guard_start(guard(3, 3, 3));
  guard_restore(back, guard_window_losses(g), guard_window_norms(g), 1);
  EXPECT_EQ(guard_limits_of(back).loss, guard_limits_of(g).loss);
  EXPECT_EQ(guard_limits_of(back).norm, guard_limits_of(g).norm);
  EXPECT_EQ(back.skips_in_row, 1);
  spike_guard shorter = guard_start(guard(3, 3, 2));
  guard_restore(shorter, guard_window_losses(g), guard_window_norms(g), 0);
  EXPECT_EQ(guard_window_losses(shorter), (std::vector<double>{4, 5}));
}

TEST(Guard, TheGateSkipsNonFiniteNormsAndWhatPassesALimit) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(optimizer_skips(1.0, 5.0f, inf, inf));
  EXPECT_TRUE(optimizer_skips(std::nan(""), 5.0f, inf, inf));
  EXPECT_TRUE(optimizer_skips(INFINITY, 5.0f, inf, inf));
  EXPECT_TRUE(optimizer_skips(2.0, 5.0f, 1.5f, inf));
  EXPECT_FALSE(optimizer_skips(1.5, 5.0f, 1.5f, inf)) << "at the limit is not past it";
  EXPECT_TRUE(optimizer_skips(1.0, 5.0f, inf, 4.0f));
}

}  // namespace
