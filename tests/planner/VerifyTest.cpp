// Mutation tests of the verifier (codegen/planner/Verify.h): one per failure branch.
// Each plans a small valid spec, checks that verify_plan accepts it, breaks
// exactly one invariant in the schedule or memory plan, and checks the report.
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "codegen/planner/Verify.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

// full_shard over 4 ranks, 4 blocks, one unit each, forward and backward prefetch.
Config full_shard() {
  Config c;
  c.world = 4;
  return c;
}

// hybrid_shard: 2 shard groups of 2 ranks, 2 micro-batches reduced every time.
Config hybrid() {
  Config c = full_shard();
  c.sharding = "hybrid_shard";
  c.shard_group = 2;
  c.micro_batches = 2;
  return c;
}

// hybrid_shard with offload = cpu: the gradient norm, the optimizer and the
// all-reduces of host memory run on the host.
Config offload() {
  Config c = hybrid();
  c.offload = "cpu";
  return c;
}

Planned valid(const Config& c) {
  Planned p = plan_text(c.text());
  std::vector<std::string> errors = verify_plan(p.schedule, p.memory);
  EXPECT_TRUE(errors.empty()) << c.name() << ":\n  "
                              << fmt::format("{}", fmt::join(errors, "\n  "));
  return p;
}

// Whether there are errors and every one contains every fragment.
testing::AssertionResult reports_only(const std::vector<std::string>& errors,
                                      const std::vector<std::string>& fragments) {
  if (errors.empty()) return testing::AssertionFailure() << "no error reported";
  for (const std::string& e : errors)
    for (const std::string& f : fragments)
      if (e.find(f) == std::string::npos)
        return testing::AssertionFailure()
               << "\"" << e << "\" lacks \"" << f << "\"; all errors:\n  "
               << fmt::format("{}", fmt::join(errors, "\n  "));
  return testing::AssertionSuccess();
}

Op& first_op(Schedule& s, const std::function<bool(const Op&)>& pred) {
  auto it = std::find_if(s.ops.begin(), s.ops.end(), pred);
  EXPECT_NE(it, s.ops.end()) << "no such op";
  return it == s.ops.end() ? s.ops.front() : *it;
}

int find_buffer(const Schedule& s, BufferKind kind, int unit) {
  for (const Buffer& b : s.buffers)
    if (b.kind == kind && b.unit == unit) return b.id;
  ADD_FAILURE() << "no " << to_string(kind) << " buffer of unit " << unit;
  return 0;
}

bool uses(const Op& op, int buffer) {
  return std::find(op.uses.begin(), op.uses.end(), buffer) != op.uses.end();
}

void erase(std::vector<int>& v, int x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}

// The forward of a block unit and the unsharded params it computes with.
struct ForwardOnParams {
  int op = 0;
  int params = 0;
};
ForwardOnParams forward_of_unit(Schedule& s, int unit) {
  const int params = find_buffer(s, BufferKind::UnshardedParams, unit);
  const Op& f =
      first_op(s, [&](const Op& op) { return op.kind == OpKind::Forward && uses(op, params); });
  return {f.id, params};
}

// The last all-gather issued before op that fills buffer.
int gather_of(const Schedule& s, int buffer, int op) {
  int ag = -1;
  for (const Op& o : s.ops)
    if (o.id < op && o.kind == OpKind::AllGather && uses(o, buffer)) ag = o.id;
  EXPECT_GE(ag, 0) << "no all-gather fills " << s.buffers[buffer].name;
  return ag;
}

TEST(Verify, DependenciesPointBackwards) {
  Planned p = valid(full_shard());
  Op& f = first_op(p.schedule, [](const Op& op) { return op.kind == OpKind::Forward; });
  f.deps.push_back(f.id + 1);
  auto errors = verify_plan(p.schedule, p.memory);
  EXPECT_TRUE(reports_only(errors, {fmt::format("op #{} ({}) depends on #{}, which is not issued "
                                                "before it",
                                                f.id, f.label(), f.id + 1)}));
  EXPECT_EQ(errors.size(), 1u);
}

// The all-gather of unit 2 no longer fills its unsharded params.
TEST(Verify, ComputeUsesParamsNoGatherFills) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  auto [f, params] = forward_of_unit(s, 2);
  for (Op& op : s.ops)
    if (op.kind == OpKind::AllGather) erase(op.uses, params);
  EXPECT_TRUE(reports_only(
      verify_plan(s, p.memory),
      {fmt::format("uses {} before any all-gather fills it", s.buffers[params].name)}));
}

TEST(Verify, ComputeWaitsForItsGather) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  auto [f, params] = forward_of_unit(s, 2);
  const int ag = gather_of(s, params, f);
  erase(s.ops[f].deps, ag);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(
      reports_only(errors, {fmt::format("{} (#{}) does not wait for the all-gather #{} of {}",
                                        s.ops[f].label(), f, ag, s.buffers[params].name)}));
  EXPECT_EQ(errors.size(), 1u);
}

// The forward of unit 2's segment is relabelled as unit 3's: it computes
// with the params of another unit.
TEST(Verify, ComputeUsesItsOwnUnitsParams) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  auto [f, params] = forward_of_unit(s, 2);
  s.ops[f].unit = 3;
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(
      reports_only(errors, {fmt::format("(#{}) computes unit 3 with the params of unit 2", f)}));
  EXPECT_EQ(errors.size(), 1u);
}

// Unit 2's params are freed before the forward that uses them.
TEST(Verify, ParamsAreNotUsedAfterTheirFree) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  auto [f, params] = forward_of_unit(s, 2);
  int earlier_free = -1;
  for (const Op& op : s.ops)
    if (op.id < f && op.kind == OpKind::Free) earlier_free = op.id;
  ASSERT_GE(earlier_free, 0);
  for (Op& op : s.ops)
    erase(op.frees, params);
  s.ops[earlier_free].frees.push_back(params);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("uses {} after its free #{}", s.buffers[params].name, earlier_free)}));
  EXPECT_EQ(errors.size(), 1u);
}

TEST(Verify, UnshardedParamsAreFreed) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  // The root unit is not counted against max_inflight: dropping its Free
  // breaks nothing else.
  const int params = find_buffer(s, BufferKind::UnshardedParams, 0);
  for (Op& op : s.ops)
    erase(op.frees, params);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("unsharded params {} are never freed", s.buffers[params].name)}));
  EXPECT_EQ(errors.size(), 1u);
}

// The first reduce-scatter of the step (the last block's) is relabelled as
// unit 1's, whose backward comes later.
TEST(Verify, ReduceScatterFollowsTheLastBackward) {
  Planned p = valid(full_shard());
  Op& rs = first_op(p.schedule, [](const Op& op) { return op.kind == OpKind::ReduceScatter; });
  ASSERT_NE(rs.unit, 1);
  rs.unit = 1;
  auto errors = verify_plan(p.schedule, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("(#{}) is issued before the last backward of unit 1", rs.id)}));
  EXPECT_EQ(errors.size(), 1u);
}

TEST(Verify, ReduceScatterWaitsForTheLastBackward) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  Op& rs = first_op(s, [](const Op& op) { return op.kind == OpKind::ReduceScatter; });
  int last_backward = -1;
  for (const Op& op : s.ops)
    if (op.kind == OpKind::Backward && op.unit == rs.unit) last_backward = op.id;
  ASSERT_GE(last_backward, 0);
  erase(rs.deps, last_backward);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("{} (#{}) does not wait for the last backward #{} that writes its "
                           "gradients",
                           rs.label(), rs.id, last_backward)}));
  EXPECT_EQ(errors.size(), 1u);
}

// The schedule keeps two block units gathered at once (prefetch) under a
// max_inflight of 1.
TEST(Verify, MaxInflightHolds) {
  Planned p = valid(full_shard());
  p.schedule.units.spec.parallel.prefetch.max_inflight = 1;
  EXPECT_TRUE(reports_only(verify_plan(p.schedule, p.memory),
                           {"unsharded units alive at op #", "more than max_inflight 1"}));
}

// A buffer placed just past the arena's end (it overlaps no other).
TEST(Verify, BuffersEndInsideTheArena) {
  Planned p = valid(full_shard());
  const int shard = find_buffer(p.schedule, BufferKind::ParamShard, 1);
  p.memory.placements[shard].offset = p.memory.device_arena_bytes;
  auto errors = verify_plan(p.schedule, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("buffer {} ends past the arena", p.schedule.buffers[shard].name)}));
  EXPECT_EQ(errors.size(), 1u);
}

// Two param shards of equal size, both alive all step, placed at the same offset.
TEST(Verify, LiveBuffersDoNotShareBytes) {
  Planned p = valid(full_shard());
  const Schedule& s = p.schedule;
  const int a = find_buffer(s, BufferKind::ParamShard, 1),
            b = find_buffer(s, BufferKind::ParamShard, 2);
  ASSERT_EQ(s.buffers[a].bytes, s.buffers[b].bytes);
  p.memory.placements[b].offset = p.memory.placements[a].offset;
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {"share bytes while both are alive", s.buffers[a].name, s.buffers[b].name}));
  EXPECT_EQ(errors.size(), 1u);
}

// An all-gather whose buffer reuses the bytes of a freed buffer no longer
// waits for a compute op at or after that Free: it may overwrite bytes still in use.
TEST(Verify, ReuseIsOrderedAfterTheFree) {
  Planned p = valid(full_shard());
  Schedule& s = p.schedule;
  const auto& pl = p.memory.placements;
  for (const Buffer& late : s.buffers) {
    if (late.space != MemSpace::Device || late.persistent) continue;
    Op& first = s.ops[pl[late.id].first_op];
    if (first.kind != OpKind::AllGather) continue;
    for (const Buffer& early : s.buffers) {
      const bool overlap = early.space == MemSpace::Device &&
                           pl[early.id].offset < pl[late.id].offset + late.bytes &&
                           pl[late.id].offset < pl[early.id].offset + early.bytes;
      if (!overlap || pl[early.id].last_op >= pl[late.id].first_op) continue;
      const int free_op = pl[early.id].last_op;
      std::erase_if(first.deps,
                    [&](int d) { return s.ops[d].stream == StreamId::Compute && d >= free_op; });
      auto errors = verify_plan(s, p.memory);
      EXPECT_TRUE(reports_only(
          errors, {fmt::format("{} reuses the bytes of {} but its first use #{} is not ordered "
                               "after that buffer's free #{}",
                               late.name, early.name, first.id, free_op)}));
      EXPECT_EQ(errors.size(), 1u);
      return;
    }
  }
  FAIL() << "no all-gather fills bytes that an earlier buffer used";
}

TEST(Verify, PeakBreakdownSumsToThePeak) {
  Planned p = valid(full_shard());
  MemoryPlan& m = p.memory;
  m.peak_by_kind[static_cast<int>(BufferKind::Activations)] += 256;
  auto errors = verify_plan(p.schedule, m);
  EXPECT_TRUE(
      reports_only(errors, {fmt::format("peak breakdown sums to {} B, but the live peak is {} B",
                                        m.live_peak_bytes + 256, m.live_peak_bytes)}));
  EXPECT_EQ(errors.size(), 1u);
}

// A plan whose live peak (and its breakdown) exceeds its arena.
TEST(Verify, ArenaHoldsThePeak) {
  Planned p = valid(full_shard());
  MemoryPlan& m = p.memory;
  const int64_t excess_bytes = m.device_arena_bytes + 256 - m.live_peak_bytes;
  m.live_peak_bytes += excess_bytes;
  m.peak_by_kind[static_cast<int>(BufferKind::Activations)] += excess_bytes;
  auto errors = verify_plan(p.schedule, m);
  EXPECT_TRUE(
      reports_only(errors, {fmt::format("device arena {} B is smaller than the live peak {} B",
                                        m.device_arena_bytes, m.live_peak_bytes)}));
  EXPECT_EQ(errors.size(), 1u);
}

// hybrid_shard: an all-gather over the whole world instead of its shard group of 2.
TEST(Verify, CollectiveGroupSizeIsItsGroups) {
  Planned p = valid(hybrid());
  Op& ag = first_op(p.schedule, [](const Op& op) { return op.kind == OpKind::AllGather; });
  ASSERT_EQ(ag.group, CommGroup::Shard);
  ag.group_size = 4;
  auto errors = verify_plan(p.schedule, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("{} (#{}) has group size 4, but its shard group has 2 ranks", ag.label(),
                           ag.id)}));
  EXPECT_EQ(errors.size(), 1u);
}

std::vector<int> cross_replica_all_reduces(const Schedule& s) {
  std::vector<int> ids;
  for (const Op& op : s.ops)
    if (op.kind == OpKind::AllReduce && op.unit >= 0) ids.push_back(op.id);
  return ids;
}

// The first and the last cross-replica all-reduce swap units: the first now
// reduces a unit whose last backward comes after it.
TEST(Verify, HybridAllReduceFollowsTheLastMicroBatch) {
  Planned p = valid(hybrid());
  Schedule& s = p.schedule;
  std::vector<int> ars = cross_replica_all_reduces(s);
  ASSERT_GE(ars.size(), 2u);
  Op &first = s.ops[ars.front()], &last = s.ops[ars.back()];
  std::swap(first.unit, last.unit);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(errors, {fmt::format("{} (#{}) comes before the last micro-batch's "
                                                "backward #",
                                                first.label(), first.id)}));
  EXPECT_EQ(errors.size(), 1u);
}

// A unit's cross-replica all-reduce issued a second time at the end of the step.
TEST(Verify, HybridAllReducesOncePerStep) {
  Planned p = valid(hybrid());
  Schedule& s = p.schedule;
  std::vector<int> ars = cross_replica_all_reduces(s);
  ASSERT_FALSE(ars.empty());
  Op again = s.ops[ars.front()];
  again.id = static_cast<int>(s.ops.size());
  s.ops.push_back(again);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("unit {} has 2 cross-replica all-reduces per step; hybrid sharding "
                           "needs exactly one",
                           again.unit)}));
  EXPECT_EQ(errors.size(), 1u);
}

// offload: the gradient norm, on the host, reads a gradient in device memory.
TEST(Verify, HostOpsUseHostMemory) {
  Planned p = valid(offload());
  Schedule& s = p.schedule;
  const int grads = find_buffer(s, BufferKind::UnshardedGrads, 1);
  ASSERT_EQ(s.buffers[grads].space, MemSpace::Device);
  Op& norm = first_op(s, [](const Op& op) { return op.kind == OpKind::GradNorm; });
  ASSERT_TRUE(runs_on_host(s, norm));
  norm.uses.push_back(grads);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("{} (#{}) runs on the host but uses {}, which is in device memory",
                           norm.label(), norm.id, s.buffers[grads].name)}));
  EXPECT_EQ(errors.size(), 1u);
}

// offload: a backward waits for the first cross-replica all-reduce, which
// reduces a host gradient shard on the host.
TEST(Verify, DeviceNeverWaitsForTheHost) {
  Planned p = valid(offload());
  Schedule& s = p.schedule;
  const Op& host_ar = first_op(
      s, [&](const Op& op) { return op.kind == OpKind::AllReduce && runs_on_host(s, op); });
  Op& backward =
      first_op(s, [&](const Op& op) { return op.kind == OpKind::Backward && op.id > host_ar.id; });
  backward.deps.push_back(host_ar.id);
  auto errors = verify_plan(s, p.memory);
  EXPECT_TRUE(reports_only(
      errors, {fmt::format("{} (#{}) runs on the device but waits for {} (#{}), "
                           "which runs on the host",
                           backward.label(), backward.id, host_ar.label(), host_ar.id)}));
  EXPECT_EQ(errors.size(), 1u);
}

// The validation pass is the step's prefix up to micro-batch 0's loss: a
// gradient op inside it, or a segment whose forward it lacks, is reported.
TEST(Verify, ValidationPassIsAForwardPass) {
  Planned p = valid(hybrid());
  const int loss = first_op(p.schedule, [&](const Op& op) {
                     return op.kind == OpKind::Forward && op.micro_batch == 0 &&
                            op.segment == static_cast<int>(p.schedule.units.segments.size()) - 1;
                   }).id;
  Op& before = p.schedule.ops[static_cast<size_t>(loss - 1)];
  const OpKind kind = before.kind;
  before.kind = OpKind::ReduceScatter;  // other invariants break too: find this one's report
  const std::string all = fmt::format("{}", fmt::join(verify_plan(p.schedule, p.memory), "\n"));
  EXPECT_NE(all.find(fmt::format("validation pass: op #{} RS comes before the loss of "
                                 "micro-batch 0 but is not an all-gather, a forward",
                                 loss - 1)),
            std::string::npos)
      << all;
  before.kind = kind;
  Op& embed = first_op(p.schedule, [](const Op& op) { return op.kind == OpKind::Forward; });
  embed.micro_batch = 1;
  EXPECT_TRUE(
      reports_only(verify_plan(p.schedule, p.memory), {"validation pass", "micro-batch 1"}));
}

}  // namespace
}  // namespace fsdpgen::test
