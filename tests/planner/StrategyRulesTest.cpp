// What each strategy, backward prefetch, recompute, offload and accumulation
// setting must do to the schedule and memory plan of the tiny model, checked
// as rules over every combination (the same 105 cases the full golden dumps
// used to cover; GoldenScheduleTest keeps five of them as readable examples).
// Each rule names the regression it guards: a rule breaks when the planner
// gathers, frees, reduces, prefetches or recomputes differently from the
// strategy's definition, not when an op moves for an unrelated reason.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>

#include "tests/common/TestName.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

struct RuleCase {
  Config config;
  std::string name;
};

bool hybrid(const Config& c) {
  return c.sharding.rfind("hybrid", 0) == 0;
}
// Strategies that free a unit's gathered parameters after its forward and
// gather them again for its backward (FSDP's reshard_after_forward).
bool reshards(const Config& c) {
  return c.sharding == "full_shard" || c.sharding == "hybrid_shard";
}

std::vector<RuleCase> rule_cases() {
  std::vector<RuleCase> out;
  for (const char* st :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"}) {
    for (const char* bwd : {"pre", "post", "none"})
      for (const char* rc : {"none", "block"})
        for (auto [mb, red] :
             {std::pair{1, "every"}, std::pair{4, "every"}, std::pair{4, "last"}}) {
          Config c;
          c.sharding = st;
          c.world = hybrid(c) ? 4 : 2;
          c.shard_group = c.world == 4 ? 2 : 0;
          c.backward = bwd;
          c.recompute = rc;
          c.micro_batches = mb;
          c.reduce = red;
          c.layers = 2;
          out.push_back({c, fmt::format("{}-bwd_{}-recompute_{}-mb{}_{}", st, bwd, rc, mb, red)});
        }
    for (const char* rc : {"none", "block", "block+offload"}) {
      Config c;
      c.sharding = st;
      c.world = hybrid(c) ? 4 : 2;
      c.shard_group = c.world == 4 ? 2 : 0;
      c.recompute = std::string(rc) == "none" ? "none" : "block";
      c.offload_activations = std::string(rc) == "block+offload";
      c.units = "each linear";
      c.layers = 2;
      out.push_back({c, fmt::format("{}-each_linear-recompute_{}", st,
                                    c.offload_activations ? "block_offload_acts" : rc)});
    }
  }
  return out;
}

void PrintTo(const RuleCase& r, std::ostream* os) {
  *os << r.name;
}

std::string where(const Schedule& s, int op) {
  return fmt::format("op #{} ({})", op, s.ops[op].label());
}

// Issue position of the first Free op that releases `buffer` after `from`, or
// ops.size().
int free_of(const Schedule& s, int buffer, int from) {
  for (int i = from + 1; i < static_cast<int>(s.ops.size()); ++i)
    if (s.ops[i].kind == OpKind::Free &&
        std::count(s.ops[i].frees.begin(), s.ops[i].frees.end(), buffer))
      return i;
  return static_cast<int>(s.ops.size());
}

class StrategyRules : public testing::TestWithParam<RuleCase> {
 protected:
  void SetUp() override {
    c_ = GetParam().config;
    p_ = plan_text(c_.text());
    ASSERT_FALSE(p_.schedule.ops.empty());
  }
  const Schedule& s() const { return p_.schedule; }
  std::vector<int> ops_of(OpKind k) const {
    std::vector<int> out;
    for (const Op& op : s().ops)
      if (op.kind == k) out.push_back(op.id);
    return out;
  }
  int n_units() const { return static_cast<int>(s().units.units.size()); }
  int shard_size() const {
    return c_.sharding == "no_shard" ? 1 : hybrid(c_) ? c_.shard_group : c_.world;
  }

  Config c_;
  Planned p_;
};

// The step: per micro-batch, every segment's forward in order, then every
// backward in reverse; micro-batches one after another; then the grad norm
// and one optimizer step per unit. Guards a reordered or dropped F/B/OPT.
TEST_P(StrategyRules, StepOrder) {
  const int n_seg = static_cast<int>(s().units.segments.size());
  std::vector<std::string> want, got;
  for (int mb = 0; mb < c_.micro_batches; ++mb) {
    for (int i = 0; i < n_seg; ++i)
      want.push_back(fmt::format("F s{} mb{}", i, mb));
    for (int i = n_seg - 1; i >= 0; --i)
      want.push_back(fmt::format("B s{} mb{}", i, mb));
  }
  want.push_back("GRADNORM");
  for (const Op& op : s().ops) {
    if (op.stream != StreamId::Compute) continue;
    if (op.kind == OpKind::Forward || op.kind == OpKind::Backward)
      got.push_back(fmt::format("{} s{} mb{}", to_string(op.kind), op.segment, op.micro_batch));
    else if (op.kind == OpKind::GradNorm)
      got.push_back("GRADNORM");
  }
  EXPECT_EQ(got, want);
  std::vector<int> opt = ops_of(OpKind::OptimizerStep);
  ASSERT_EQ(static_cast<int>(opt.size()), n_units());
  int norm = ops_of(OpKind::GradNorm).at(0);
  for (int i : opt)
    EXPECT_GT(i, norm) << where(s(), i) << " before the grad norm";
}

// recompute = block: each recomputed segment's forward runs again after the
// micro-batch's forwards and before its own backward, from the saved input
// only; without it there is no recompute. Guards recompute dropped, run
// after its backward, or keeping every activation anyway.
TEST_P(StrategyRules, Recompute) {
  std::vector<int> rec = ops_of(OpKind::Recompute);
  if (c_.recompute == "none") {
    EXPECT_TRUE(rec.empty());
    return;
  }
  ASSERT_FALSE(rec.empty());
  int blocks_recomputed = 0;
  for (int r : rec) {
    const Op& ro = s().ops[r];
    int fwd = -1, bwd = -1;
    for (const Op& op : s().ops) {
      if (op.segment != ro.segment || op.micro_batch != ro.micro_batch) continue;
      if (op.kind == OpKind::Forward) fwd = op.id;
      if (op.kind == OpKind::Backward) bwd = op.id;
    }
    EXPECT_LT(fwd, r) << where(s(), r);
    EXPECT_LT(r, bwd) << where(s(), r) << " after its backward";
    // The forward kept no intermediates: what the recompute rebuilds goes to
    // scratch, which is free by the time the next segment's forward ran.
    int scratch = ro.operand(Role::RecomputeScratch);
    ASSERT_GE(scratch, 0) << where(s(), r);
    EXPECT_LT(free_of(s(), scratch, r), static_cast<int>(s().ops.size()))
        << where(s(), r) << ": scratch never freed";
    blocks_recomputed += ro.segment > 0;
  }
  if (c_.units == "each block") {  // both blocks, every micro-batch
    EXPECT_EQ(blocks_recomputed, c_.layers * c_.micro_batches);
  }
  // Less saved for backward than without recompute.
  Config none = c_;
  none.recompute = "none";
  none.offload_activations = false;
  Planned q = plan_text(none.text());
  auto acts = [](const Planned& p) {
    return p.memory.total_by_kind[static_cast<int>(BufferKind::Activations)];
  };
  EXPECT_LT(acts(p_), acts(q));
}

// Collectives: which ops, over which group, with how many bytes. Guards a
// wrong group (shard vs replica), a missing hybrid all-reduce, a gather or
// reduce-scatter under no_shard, or a payload that is not the unit's.
TEST_P(StrategyRules, Collectives) {
  std::vector<int> ag = ops_of(OpKind::AllGather), rs = ops_of(OpKind::ReduceScatter),
                   ar = ops_of(OpKind::AllReduce);
  std::map<int, int64_t> unit_bytes;  // unsharded flat parameter bytes per unit
  for (const Buffer& b : s().buffers)
    if (b.kind == BufferKind::ParamShard) unit_bytes[b.unit] = b.bytes * shard_size();
  int scalars = 0;
  for (int i : ar)
    if (s().ops[i].unit < 0) {
      ++scalars;
      EXPECT_EQ(s().ops[i].payload_bytes, 8) << where(s(), i);
    }
  // The grad norm's scalar is summed over the shard group; no_shard's
  // gradients are whole on every rank, so there is nothing to sum.
  EXPECT_EQ(scalars, c_.sharding == "no_shard" ? 0 : 1) << "all-reduces of the grad norm";
  if (c_.sharding == "no_shard") {
    EXPECT_TRUE(ag.empty());
    EXPECT_TRUE(rs.empty());
    int grads = 0;
    for (int i : ar) {
      const Op& op = s().ops[i];
      if (op.unit < 0) continue;
      ++grads;
      EXPECT_EQ(op.group, CommGroup::Replica) << where(s(), i);
      EXPECT_EQ(op.group_size, c_.world) << where(s(), i);
    }
    EXPECT_EQ(grads, n_units() * (c_.reduce == "every" ? c_.micro_batches : 1));
    return;
  }
  ASSERT_FALSE(ag.empty());
  for (int i : ag) {
    const Op& op = s().ops[i];
    EXPECT_EQ(op.group, CommGroup::Shard) << where(s(), i);
    EXPECT_EQ(op.group_size, shard_size()) << where(s(), i);
    EXPECT_EQ(op.payload_bytes, unit_bytes.at(op.unit)) << where(s(), i);
  }
  std::map<int, int> last_rs;
  for (int i : rs) {
    const Op& op = s().ops[i];
    EXPECT_EQ(op.group, CommGroup::Shard) << where(s(), i);
    EXPECT_EQ(op.group_size, shard_size()) << where(s(), i);
    EXPECT_EQ(op.payload_bytes, unit_bytes.at(op.unit)) << where(s(), i);
    last_rs[op.unit] = i;
  }
  EXPECT_EQ(static_cast<int>(rs.size()), n_units() * (c_.reduce == "every" ? c_.micro_batches : 1));
  int replica = 0;
  for (int i : ar) {
    const Op& op = s().ops[i];
    if (op.unit < 0) continue;
    ++replica;
    ASSERT_TRUE(hybrid(c_)) << where(s(), i) << ": a grad all-reduce without replicas";
    EXPECT_EQ(op.group, CommGroup::Replica) << where(s(), i);
    EXPECT_EQ(op.group_size, c_.world / c_.shard_group) << where(s(), i);
    EXPECT_EQ(op.payload_bytes, unit_bytes.at(op.unit) / shard_size()) << where(s(), i);
    EXPECT_GT(i, last_rs.at(op.unit)) << where(s(), i) << " before the unit's reduce-scatter";
  }
  EXPECT_EQ(replica, hybrid(c_) ? n_units() : 0);
}

// Accumulation: reduce = every reduces each unit once per micro-batch, right
// after its backward; reduce = last only after the last micro-batch's.
// Guards reducing every micro-batch under 'last' (or only once under
// 'every').
TEST_P(StrategyRules, ReduceWhen) {
  OpKind reduce = c_.sharding == "no_shard" ? OpKind::AllReduce : OpKind::ReduceScatter;
  for (int i : ops_of(reduce)) {
    const Op& op = s().ops[i];
    if (op.unit < 0) continue;
    ASSERT_GE(op.micro_batch, 0) << where(s(), i);
    if (c_.reduce == "last") {
      EXPECT_EQ(op.micro_batch, c_.micro_batches - 1) << where(s(), i);
    }
    // After every backward of its unit in that micro-batch.
    for (const Op& b : s().ops) {
      if (b.kind == OpKind::Backward && b.micro_batch == op.micro_batch &&
          s().units.segments[b.segment].unit == op.unit) {
        EXPECT_GT(i, b.id) << where(s(), i) << " before " << where(s(), b.id);
      }
    }
  }
}

// Resharding: full_shard and hybrid_shard free a unit's gathered parameters
// after its forward and gather them again for the backward; shard_grad_op
// and hybrid_shard_zero2 keep them (one gather per unit and micro-batch);
// no_shard computes on the shard itself. The root unit is gathered once.
// Guards a missing free after forward (memory) or a needless re-gather
// (communication).
TEST_P(StrategyRules, ParamsFreedOrKept) {
  std::map<int, int> gathers;
  for (int i : ops_of(OpKind::AllGather))
    ++gathers[s().ops[i].unit];
  if (c_.sharding == "no_shard") {
    for (const Op& op : s().ops)
      if (op.kind == OpKind::Forward || op.kind == OpKind::Backward) {
        int b = op.operand(Role::Params);
        ASSERT_GE(b, 0) << where(s(), op.id);
        EXPECT_EQ(s().buffers[b].kind, BufferKind::ParamShard) << where(s(), op.id);
      }
    return;
  }
  EXPECT_EQ(gathers[0], 1) << "the root unit is gathered once per step";
  for (const Op& f : s().ops) {
    if (f.kind != OpKind::Forward || s().units.segments[f.segment].unit == 0) continue;
    int params = f.operand(Role::Params);
    const Op* b = nullptr;
    for (const Op& op : s().ops)
      if (op.kind == OpKind::Backward && op.segment == f.segment && op.micro_batch == f.micro_batch)
        b = &op;
    ASSERT_TRUE(b);
    if (reshards(c_)) {
      EXPECT_NE(b->operand(Role::Params), params)
          << where(s(), b->id) << " reuses the forward's gathered params";
      EXPECT_LT(free_of(s(), params, f.id), b->id)
          << "params of " << where(s(), f.id) << " not freed before its backward";
    } else {
      EXPECT_EQ(b->operand(Role::Params), params)
          << where(s(), b->id) << " gathers again though the strategy keeps params";
    }
  }
  if (!reshards(c_)) {
    for (int u = 1; u < n_units(); ++u)
      EXPECT_EQ(gathers[u], c_.micro_batches) << "unit " << u;
  }
}

// Backward prefetch (reshard strategies, one unit per block): 'pre' issues
// the next unit's gather before the current backward, 'post' after it but
// before the current unit's params are freed, 'none' only once they are.
// Guards a prefetch mode that does nothing, or the wrong one.
class PrefetchRules : public StrategyRules {};

TEST_P(PrefetchRules, BackwardPrefetch) {
  int checked = 0;
  for (int g : ops_of(OpKind::AllGather)) {
    int dst = s().ops[g].operand(Role::Dst);
    int user = -1;
    for (int i = g + 1; i < static_cast<int>(s().ops.size()) && user < 0; ++i)
      if (s().ops[i].stream == StreamId::Compute && s().ops[i].operand(Role::Params) == dst)
        user = i;
    if (user < 0 || s().ops[user].kind != OpKind::Backward) continue;
    int prev = -1;  // the backward that runs before the gathered one
    for (int i = user - 1; i >= 0 && prev < 0; --i)
      if (s().ops[i].kind == OpKind::Backward) prev = i;
    ASSERT_GE(prev, 0);
    int prev_params = s().ops[prev].operand(Role::Params);
    int prev_free = s().buffers[prev_params].persistent || s().buffers[prev_params].unit == 0
                        ? -1
                        : free_of(s(), prev_params, prev);
    ++checked;
    if (c_.backward == "pre") {
      EXPECT_LT(g, prev) << where(s(), g) << " not prefetched before " << where(s(), prev);
    } else {
      EXPECT_GT(g, prev) << where(s(), g) << " issued before " << where(s(), prev);
      if (prev_free >= 0 && c_.backward == "post") {
        EXPECT_LT(g, prev_free) << where(s(), g) << " waits for " << where(s(), prev_free);
      }
      if (prev_free >= 0 && c_.backward == "none") {
        EXPECT_GT(g, prev_free) << where(s(), g) << " before " << where(s(), prev_free);
      }
    }
  }
  EXPECT_EQ(checked, c_.layers * c_.micro_batches);
}

// Activation offload: each saved input goes to the host after its forward
// and comes back, with the same bytes, before the recompute that reads it.
// Guards a copy dropped or issued after its reader.
TEST_P(StrategyRules, ActivationOffload) {
  std::vector<int> d2h = ops_of(OpKind::CopyD2H), h2d = ops_of(OpKind::CopyH2D);
  if (!c_.offload_activations) {
    EXPECT_TRUE(d2h.empty());
    EXPECT_TRUE(h2d.empty());
    return;
  }
  ASSERT_FALSE(d2h.empty());
  EXPECT_EQ(d2h.size(), h2d.size());
  for (int d : d2h) {
    const Op& down = s().ops[d];
    const Op* up = nullptr;
    for (int h : h2d)
      if (s().ops[h].segment == down.segment && s().ops[h].micro_batch == down.micro_batch)
        up = &s().ops[h];
    ASSERT_TRUE(up) << where(s(), d) << " never copied back";
    EXPECT_GT(up->id, d);
    EXPECT_EQ(up->payload_bytes, down.payload_bytes) << where(s(), up->id);
    // The device copy is given back while the host holds it.
    int src = down.operand(Role::Src), host = down.operand(Role::Dst);
    ASSERT_GE(src, 0);
    ASSERT_GE(host, 0);
    EXPECT_EQ(s().buffers[host].space, MemSpace::Host) << where(s(), d);
    EXPECT_LT(free_of(s(), src, d), up->id) << where(s(), d) << ": device copy kept";
    for (int r : ops_of(OpKind::Recompute)) {
      if (s().ops[r].segment == down.segment && s().ops[r].micro_batch == down.micro_batch) {
        EXPECT_LT(up->id, r) << where(s(), up->id) << " after its reader";
      }
    }
  }
}

// Memory plan: the arena holds the live peak, reuse saves memory, the peak
// breakdown adds up. Guards an arena smaller than the peak (overlap) or a
// report that disagrees with itself.
TEST_P(StrategyRules, MemoryPeak) {
  const MemoryPlan& m = p_.memory;
  EXPECT_GE(m.device_arena_bytes, m.live_peak_bytes);
  EXPECT_LT(m.device_arena_bytes, m.naive_bytes);
  int64_t sum = 0;
  for (int64_t b : m.peak_by_kind)
    sum += b;
  EXPECT_EQ(sum, m.live_peak_bytes);
  // Sharding holds less per rank than keeping whole copies.
  if (c_.sharding != "no_shard") {
    Config whole = c_;
    whole.sharding = "no_shard";
    whole.shard_group = 0;
    Planned q = plan_text(whole.text());
    auto kind = [](const MemoryPlan& mp, BufferKind k) {
      return mp.total_by_kind[static_cast<int>(k)];
    };
    EXPECT_LT(kind(m, BufferKind::OptimizerState), kind(q.memory, BufferKind::OptimizerState));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, StrategyRules, testing::ValuesIn(rule_cases()),
                         [](const testing::TestParamInfo<RuleCase>& info) {
                           return test_name_of(info.param.name);
                         });

// The cases with a backward re-gather to place: strategies that free params
// after forward, one unit per block, no recompute.
std::vector<RuleCase> prefetch_cases() {
  std::vector<RuleCase> out;
  for (const RuleCase& r : rule_cases())
    if (reshards(r.config) && r.config.units == "each block" && r.config.recompute == "none")
      out.push_back(r);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Tiny, PrefetchRules, testing::ValuesIn(prefetch_cases()),
                         [](const testing::TestParamInfo<RuleCase>& info) {
                           return test_name_of(info.param.name);
                         });

}  // namespace
}  // namespace fsdpgen::test
