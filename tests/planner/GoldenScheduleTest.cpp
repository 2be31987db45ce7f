// Golden schedules and memory plans of the tiny model under every strategy x
// backward prefetch x recompute x accumulation combination:
// tests/planner/golden/NAME.txt. FSDPGEN_UPDATE_GOLDEN=1 rewrites them.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tests/common/TestName.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

struct GoldenCase {
  Config config;
  std::string file;
};

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  for (const char* st :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"})
    for (const char* bwd : {"pre", "post", "none"})
      for (const char* rc : {"none", "block"})
        for (auto [mb, red] :
             {std::pair{1, "every"}, std::pair{4, "every"}, std::pair{4, "last"}}) {
          Config c;
          c.sharding = st;
          c.world = c.sharding.rfind("hybrid", 0) == 0 ? 4 : 2;
          c.shard_group = c.world == 4 ? 2 : 0;
          c.backward = bwd;
          c.recompute = rc;
          c.micro_batches = mb;
          c.reduce = red;
          c.layers = 2;
          out.push_back({c, fmt::format("{}-bwd_{}-recompute_{}-mb{}_{}", st, bwd, rc, mb, red)});
        }
  // Per-linear units (sub-block): every strategy, with and without recompute
  // (which rebuilds a block from its four units) and activation offload.
  for (const char* st :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"})
    for (const char* rc : {"none", "block", "block+offload"}) {
      Config c;
      c.sharding = st;
      c.world = c.sharding.rfind("hybrid", 0) == 0 ? 4 : 2;
      c.shard_group = c.world == 4 ? 2 : 0;
      c.recompute = std::string(rc) == "none" ? "none" : "block";
      c.offload_activations = std::string(rc) == "block+offload";
      c.units = "each linear";
      c.layers = 2;
      out.push_back({c, fmt::format("{}-each_linear-recompute_{}", st,
                                    c.offload_activations ? "block_offload_acts" : rc)});
    }
  return out;
}

void PrintTo(const GoldenCase& g, std::ostream* os) {
  *os << g.file;
}

class GoldenSchedule : public testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenSchedule, Matches) {
  const GoldenCase& g = GetParam();
  Planned p = plan_text(g.config.text());
  std::string text = "# " + g.config.name() + "\n" + print_schedule(p.schedule) +
                     print_memory_plan(p.schedule, p.memory);
  std::filesystem::path path =
      std::filesystem::path(FSDPGEN_SOURCE_DIR) / "tests/planner/golden" / (g.file + ".txt");
  if (std::getenv("FSDPGEN_UPDATE_GOLDEN")) {
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << "missing golden " << path << " (run with FSDPGEN_UPDATE_GOLDEN=1)";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(text, want.str()) << path;
}

INSTANTIATE_TEST_SUITE_P(Tiny, GoldenSchedule, testing::ValuesIn(golden_cases()),
                         [](const testing::TestParamInfo<GoldenCase>& info) {
                           return test_name_of(info.param.file);
                         });

}  // namespace
}  // namespace fsdpgen::test
