// RunLog: the --metrics line is JSON a parser reads (a non-finite loss,
// norm or validation loss is null) with the documented fields.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/train/run_log.h"

namespace {

nlohmann::json metrics_line(const step_record& r) {
  std::FILE* f = std::tmpfile();
  run_log_metrics_line(f, r);
  std::rewind(f);
  char buf[4096] = {};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  return nlohmann::json::parse(std::string(buf, n));
}

TEST(RunLog, MetricsLineIsJsonWithNullForNonFiniteValues) {
  step_record r;
  r.step = 4;
  r.loss = 2.5;
  r.grad_norm = 0.75;
  r.lr = 1e-3;
  r.tokens_per_s = 1234.5;
  r.epoch = 1;
  nlohmann::json j = metrics_line(r);
  EXPECT_EQ(j["step"], 5);
  EXPECT_EQ(j["loss"], 2.5);
  EXPECT_EQ(j["grad_norm"], 0.75);
  EXPECT_EQ(j["tokens_per_s"], 1234.5);
  EXPECT_EQ(j["epoch"], 1);
  EXPECT_FALSE(j.contains("val_loss"));
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.grad_norm = std::numeric_limits<double>::infinity();
  r.validated = true;
  r.val_loss = -std::numeric_limits<double>::infinity();
  j = metrics_line(r);
  EXPECT_TRUE(j["loss"].is_null()) << j;
  EXPECT_TRUE(j["grad_norm"].is_null()) << j;
  EXPECT_TRUE(j["val_loss"].is_null()) << j;
  r.val_loss = 3.25;
  EXPECT_EQ(metrics_line(r)["val_loss"], 3.25);
}

}  // namespace
