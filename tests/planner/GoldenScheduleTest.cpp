// Five full schedules and memory plans of the tiny model, kept as readable
// examples of what the planner produces (tests/planner/golden/README.md says
// what to look at in each). The rules each strategy, prefetch, recompute,
// offload and accumulation setting must follow are checked over every
// combination by StrategyRulesTest. FSDPGEN_UPDATE_GOLDEN=1 rewrites them.
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

Config tiny(const char* sharding) {
  Config c;
  c.sharding = sharding;
  c.world = c.sharding.rfind("hybrid", 0) == 0 ? 4 : 2;
  c.shard_group = c.world == 4 ? 2 : 0;
  c.layers = 2;
  return c;
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  Config c = tiny("full_shard");  // FSDP: gather, free after forward, gather again
  out.push_back({c, "full_shard-bwd_pre-recompute_none-mb1_every"});
  c = tiny("shard_grad_op");  // ZeRO-2, accumulating: reduce once, after the last micro-batch
  c.backward = "post";
  c.micro_batches = 4;
  c.reduce = "last";
  out.push_back({c, "shard_grad_op-bwd_post-recompute_none-mb4_last"});
  c = tiny("hybrid_shard");  // shard-group reduce-scatter, then replica all-reduce
  c.micro_batches = 4;
  out.push_back({c, "hybrid_shard-bwd_pre-recompute_none-mb4_every"});
  c = tiny("full_shard");  // recompute: RECOMPUTE before each block's backward
  c.recompute = "block";
  out.push_back({c, "full_shard-bwd_pre-recompute_block-mb1_every"});
  c = tiny("full_shard");  // per-linear units, recompute and activation offload
  c.recompute = "block";
  c.offload_activations = true;
  c.units = "each linear";
  out.push_back({c, "full_shard-each_linear-recompute_block_offload_acts"});
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
