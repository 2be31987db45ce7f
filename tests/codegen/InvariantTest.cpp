// Invariants of every generated schedule and memory plan (codegen/Verify.h),
// over a covering set of configurations at worlds 1 to 512; and proof that
// the verifier catches broken schedules.
#include <gtest/gtest.h>

#include "codegen/Verify.h"
#include "tests/codegen/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

TEST(Invariants, HoldForEveryConfiguration) {
  auto configs = covering_configs();
  EXPECT_GT(configs.size(), 400u);
  for (const Config& c : configs) {
    Planned p = plan_text(c.text());
    auto errors = verify_plan(p.schedule, p.memory);
    EXPECT_TRUE(errors.empty()) << c.name() << ":\n  "
                                << fmt::format("{}", fmt::join(errors, "\n  "));
  }
}

TEST(Invariants, HoldForTheExampleSpecs) {
  for (const char* name : {"tiny", "gpt2-124m", "gpt2-350m", "gpt2-1.5b", "gpt-175b"}) {
    FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + name + ".fsdp");
    ASSERT_TRUE(r.spec) << r.diagnostics;
    Units u = lower(*r.spec);
    Schedule s = build_schedule(u);
    MemoryPlan m = plan_memory(s);
    auto errors = verify_plan(s, m);
    EXPECT_TRUE(errors.empty()) << name << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
  }
}

Planned base() {
  Config c;
  c.world = 4;
  return plan_text(c.text());
}

bool mentions(const std::vector<std::string>& errors, const std::string& what) {
  for (const auto& e : errors)
    if (e.find(what) != std::string::npos) return true;
  return false;
}

TEST(Verifier, CatchesAComputeThatDoesNotWaitForItsGather) {
  Planned p = base();
  for (Op& op : p.schedule.ops)
    if (op.kind == OpKind::Forward && op.unit == 2) op.deps.clear();
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "does not wait for the all-gather"));
}

TEST(Verifier, CatchesAReduceScatterBeforeTheLastBackward) {
  Planned p = base();
  for (Op& op : p.schedule.ops)
    if (op.kind == OpKind::ReduceScatter) op.deps.clear();
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "does not wait for the last backward"));
}

TEST(Verifier, CatchesOverlappingLiveBuffers) {
  Planned p = base();
  for (Placement& pl : p.memory.placements)
    pl.offset = 0;
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "share bytes while both are alive"));
}

TEST(Verifier, CatchesTooManyUnitsInFlight) {
  Planned p = base();
  p.schedule.units.spec.parallel.prefetch.max_inflight = 1;
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "more than max_inflight 1"));
}

TEST(Verifier, CatchesMismatchedCollectiveGroups) {
  Planned p = base();
  for (Op& op : p.schedule.ops)
    if (op.kind == OpKind::AllGather) {
      op.group_size = 3;
      break;
    }
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "has group size 3"));
}

TEST(Verifier, CatchesAWrongPeakBreakdown) {
  Planned p = base();
  p.memory.peak_by_kind[0] += 1;
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "peak breakdown"));
}

TEST(Verifier, CatchesAHybridAllReduceEveryMicroBatch) {
  Config c;
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batches = 2;
  Planned p = plan_text(c.text());
  EXPECT_TRUE(verify_plan(p.schedule, p.memory).empty());
  // Duplicate a cross-replica all-reduce into the first micro-batch.
  Op extra;
  for (const Op& op : p.schedule.ops)
    if (op.kind == OpKind::AllReduce && op.unit > 0) extra = op;
  extra.id = 1;
  p.schedule.ops.insert(p.schedule.ops.begin() + 1, extra);
  for (size_t i = 0; i < p.schedule.ops.size(); ++i)
    p.schedule.ops[i].id = static_cast<int>(i);
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "cross-replica all-reduces per step"));
}

}  // namespace
}  // namespace fsdpgen::test
