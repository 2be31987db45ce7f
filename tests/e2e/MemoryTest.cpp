// Memory as the machine counts it: what allocating a generated binary's
// arenas added to the process's resident set (the kernel's exact count,
// smaps_rollup), and the arenas' resident pages (mincore) after every step,
// equal the bytes `fsdpgen plan` printed for the spec, in whole pages with
// the guard; the process's resident set stays
// put after the first step; and fsdpgen's code allocates nothing inside a
// step. A binary told to leak (--inject-leak) must fail the same checks,
// so the checks can fail.
#include <algorithm>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

// The kernel sums its resident-set counters per CPU lazily (runtime/
// machine_memory.h), and MPI and the threads may touch a few more stack and
// buffer pages after the first step: measured here 0 to 12 KiB over 5 steps.
constexpr int64_t kStepGrowthBoundBytes = 1 << 20;
// The process beside its arena (the program, libstdc++, OpenBLAS, Open MPI
// and its shared-memory transport): measured here about 21 MiB per rank.
constexpr int64_t kProcessOverheadBoundBytes = 128 << 20;
// What the run's output and metrics say that contradicts "the process holds
// its planned arena and a bounded rest, and a step adds nothing"; empty when
// all holds.
std::vector<std::string> memory_problems(const CmdResult& r,
                                         const std::vector<nlohmann::json>& metrics,
                                         int64_t arena_in_pages) {
  std::vector<std::string> problems;
  if (metrics.size() < 3) return {fmt::format("{} metrics lines, want 3 or more", metrics.size())};
  const int64_t settled = metrics[0].at("host_resident_bytes").get<int64_t>();
  for (size_t s = 0; s < metrics.size(); ++s) {
    const int64_t growth = metrics[s].at("arena_growth_bytes").get<int64_t>();
    const int64_t arena = metrics[s].at("arena_resident_bytes").get<int64_t>();
    const int64_t resident = metrics[s].at("host_resident_bytes").get<int64_t>();
    if (growth != arena_in_pages)
      problems.push_back(
          fmt::format("step {}: allocating the arenas grew the process by {} B, the "
                      "plan's are {} B in whole pages",
                      s + 1, growth, arena_in_pages));
    if (arena != arena_in_pages)
      problems.push_back(
          fmt::format("step {}: the kernel counts {} B of the arenas resident, the "
                      "plan {} B in whole pages",
                      s + 1, arena, arena_in_pages));
    if (resident - arena > kProcessOverheadBoundBytes)
      problems.push_back(
          fmt::format("step {}: {} B resident beside the arena", s + 1, resident - arena));
    if (resident - settled > kStepGrowthBoundBytes)
      problems.push_back(
          fmt::format("step {}: the process grew by {} B since step 1", s + 1, resident - settled));
  }
  std::smatch own;
  if (!std::regex_search(r.out, own, std::regex(R"(allocations in steps: ([0-9,]+) by fsdpgen)")))
    problems.push_back("no 'allocations in steps: N by fsdpgen' line");
  else if (own[1] != "0")
    problems.push_back(fmt::format("fsdpgen's code allocated {} times inside steps", own[1].str()));
  return problems;
}

struct Measured {
  CmdResult run;
  std::vector<nlohmann::json> metrics;
  int64_t arena_in_pages = 0;
};

Measured measure(const std::string& name, const E2eConfig& c, const std::string& args) {
  const std::filesystem::path dir = e2e_dir(name);
  const std::filesystem::path bin = build_binary(dir, c.spec());
  Measured m;
  const planned_arena_bytes planned = planned_arenas(dir, "cpu");
  m.arena_in_pages = arena_in_pages(planned.device) + arena_in_pages(planned.host);
  m.run = run_binary(c.world, bin, "--metrics metrics.jsonl " + args);
  EXPECT_EQ(m.run.status, 0) << m.run.out;
  m.metrics = read_metrics(dir / "metrics.jsonl");
  std::printf("%s", m.run.out.c_str());
  return m;
}

TEST(Memory, TheMachineCountsThePlannedArenaAndStepsAddNothing) {
  E2eConfig c;  // full_shard, world 2
  Measured m = measure("memory_full_shard", c, "--steps 5");
  EXPECT_EQ(m.metrics.size(), 5u);
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
  EXPECT_NE(m.run.out.find("arena "), std::string::npos) << m.run.out;
}

// llama's plan adds the rotary tables and its own saved arrays.
TEST(Memory, LlamaCountsThePlannedArenaToo) {
  E2eConfig c;
  c.family = "llama";
  Measured m = measure("memory_llama", c, "--steps 4");
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
}

// Validation after every step runs in the planned arena too (its pass is the
// step's own prefix) and adds nothing to the process.
TEST(Memory, ValidationRunsInThePlannedArena) {
  E2eConfig c;
  c.train_extra = "  val = synthetic(seed = 7)\n  val_every = 1\n  val_sequences = 9\n";
  Measured m = measure("memory_validation", c, "--steps 5");
  ASSERT_EQ(m.metrics.size(), 5u);
  EXPECT_TRUE(m.metrics[4].contains("val_loss")) << m.metrics[4];
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
}

// Checkpointed activations offloaded: the host arena holds them as planned.
TEST(Memory, WithActivationOffloadBothArenasAreResidentAsPlanned) {
  E2eConfig c;
  c.recompute = "block";
  c.offload_activations = true;
  Measured m = measure("memory_offload_activations", c, "--steps 4");
  ASSERT_GT(m.arena_in_pages, 0);
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
  EXPECT_NE(m.run.out.find("host "), std::string::npos) << m.run.out;
}

// Per-linear units with recompute spanning a block's units and its input
// on the host: both arenas resident as planned.
TEST(Memory, WithPerLinearUnitsAndActivationOffloadArenasAreResidentAsPlanned) {
  E2eConfig c;
  c.units = "each linear";
  c.recompute = "block";
  c.offload_activations = true;
  Measured m = measure("memory_each_linear", c, "--steps 4");
  ASSERT_GT(m.arena_in_pages, 0);
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
}

// A custom layer's saved arrays and scratch are planned like the built-in
// ones: per-linear units, recompute (its output into custom_out) and its
// input on the host.
TEST(Memory, WithACustomLayerArenasAreResidentAsPlanned) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.layers = example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)");
  c.units = "each linear";
  c.recompute = "block";
  c.offload_activations = true;
  Measured m = measure("memory_custom_layer", c, "--steps 4");
  ASSERT_GT(m.arena_in_pages, 0);
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
}

TEST(Memory, WithOffloadBothArenasAreResidentAsPlanned) {
  E2eConfig c;
  c.offload = "cpu";
  Measured m = measure("memory_offload", c, "--steps 4");
  ASSERT_GT(m.arena_in_pages, 0);
  EXPECT_EQ(memory_problems(m.run, m.metrics, m.arena_in_pages), std::vector<std::string>{});
}

// The test of the test: a step that keeps 4 MB of heap shows as fsdpgen's
// allocations and as growth of the resident set.
TEST(Memory, ALeakingStepIsCaught) {
  E2eConfig c;
  c.world = 1;
  Measured m = measure("memory_leak", c, "--steps 4 --inject-leak 4000000");
  const std::vector<std::string> problems = memory_problems(m.run, m.metrics, m.arena_in_pages);
  auto mentions = [&](const std::string& what) {
    return std::any_of(problems.begin(), problems.end(),
                       [&](const std::string& p) { return p.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(mentions("grew by")) << fmt::format("{}", fmt::join(problems, "\n"));
  EXPECT_TRUE(mentions("fsdpgen's code allocated")) << fmt::format("{}", fmt::join(problems, "\n"));
  EXPECT_FALSE(mentions("the kernel counts")) << "the arena itself did not change";
  EXPECT_GE(m.metrics.back().at("host_resident_bytes").get<int64_t>() -
                m.metrics.front().at("host_resident_bytes").get<int64_t>(),
            3 * 4000000 - kStepGrowthBoundBytes);
}

}  // namespace
}  // namespace fsdpgen::test
