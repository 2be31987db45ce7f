// Invariants of every generated schedule and memory plan (codegen/planner/Verify.h),
// over a covering set of configurations at worlds 1 to 512; and proof that
// the verifier catches broken schedules.
#include <map>

#include <gtest/gtest.h>

#include "codegen/planner/Verify.h"
#include "tests/planner/PlanTestUtil.h"

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

// Sub-block units (each linear, and explicit pieces beside whole blocks and
// leftover pieces) under every strategy, prefetch, recompute, accumulation
// and offload, at worlds 1 to 512: the invariants hold; a block split across
// units is gathered piece by piece (no gathered buffer of a whole block), and
// under recompute each of its units is gathered again for the recompute.
TEST(Invariants, HoldWithSubBlockUnits) {
  int checked = 0;
  const char* units[] = {"each linear", "unit a [block 0, block 1.ln_1, block 1.attn]",
                         "unit [block 2.ln_2, block 2.mlp]  each linear",
                         "unit x [block 3.attn.c_proj]"};
  for (const char* st :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"})
    for (int w : {1, 2, 8, 512})
      for (const char* u : units) {
        const bool hybrid = std::string(st).rfind("hybrid", 0) == 0;
        if (hybrid && w < 4) continue;
        Config c;
        c.sharding = st;
        c.world = w;
        c.shard_group = hybrid ? w / 2 : 0;
        c.units = u;
        c.recompute = checked % 3 == 0 ? "none" : "block";
        c.offload_activations = c.recompute == "block" && checked % 2 == 0;
        c.offload = checked % 5 == 1 && st != std::string("no_shard") ? "cpu" : "none";
        c.micro_batches = checked % 4 == 0 ? 4 : 1;
        c.reduce = checked % 8 == 0 ? "last" : "every";
        c.backward = checked % 3 == 1 ? "post" : checked % 3 == 2 ? "none" : "pre";
        c.forward_prefetch = checked % 7 != 0;
        c.layers = 4;
        c.width = 128;
        const Planned p = plan_text(c.text());
        auto errors = verify_plan(p.schedule, p.memory);
        EXPECT_TRUE(errors.empty())
            << c.name() << " " << u << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
        if (std::string(u) == "each linear" && (w > 1 || c.offload == "cpu") &&
            st == std::string("full_shard")) {
          std::map<int, int> gathers;  // unit -> all-gathers (or host copies) in micro-batch 0
          for (const Op& op : p.schedule.ops)
            if ((op.kind == OpKind::AllGather || (op.kind == OpKind::CopyH2D && op.segment < 0)) &&
                op.micro_batch == 0 && op.unit > 0)
              ++gathers[op.unit];
          const int expected = c.recompute == "block" ? 3 : 2;
          for (auto [unit, n] : gathers) {
            // A block's last piece needs no recompute: gathered for forward and backward only.
            const bool last_piece = p.schedule.units.units[static_cast<size_t>(unit)].name.find(
                                        "mlp_c_proj") != std::string::npos;
            EXPECT_EQ(n, last_piece ? 2 : expected) << c.name() << " unit " << unit;
          }
          EXPECT_EQ(p.schedule.units.units.size(), 1u + 4u * 4u) << c.name();
        }
        ++checked;
      }
  EXPECT_GT(checked, 60);
}

// offload = cpu with every strategy that allows it, at worlds 1 to 8 (hybrid
// with shard groups of 1, replicas only, and of half the world), with
// accumulation, recompute and both precisions: the invariants hold, among
// them that the ops a GPU program runs on the host use host memory only and
// that no device op waits for one.
TEST(Invariants, HoldWithOffloadForEveryStrategy) {
  int checked = 0;
  for (const char* st : {"full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2"})
    for (int w : {1, 2, 4, 8})
      for (int groups : {0, 1, 2})  // hybrid: shard group 1, or w / 2
        for (auto [mb, red] : {std::pair{1, "every"}, {4, "every"}, {4, "last"}})
          for (const char* dtype : {"fp32", "bf16"}) {
            const bool hybrid = std::string(st).rfind("hybrid", 0) == 0;
            if (hybrid != (groups > 0) || (groups == 1 && w < 2) || (groups == 2 && w < 4))
              continue;
            Config c;
            c.sharding = st;
            c.world = w;
            c.shard_group = groups == 0 ? 0 : groups == 1 ? 1 : w / 2;
            c.offload = "cpu";
            c.micro_batches = mb;
            c.reduce = red;
            c.param = c.reduce_dtype = dtype;
            c.recompute = checked % 2 ? "block" : "none";
            Planned p = plan_text(c.text());
            auto errors = verify_plan(p.schedule, p.memory);
            EXPECT_TRUE(errors.empty())
                << c.name() << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
            int on_host = 0;
            for (const Op& op : p.schedule.ops)
              on_host += runs_on_host(p.schedule, op);
            EXPECT_GT(on_host, 0) << c.name() << ": the optimizer runs on the host";
            ++checked;
          }
  EXPECT_GT(checked, 60);
}

// offload { activations = cpu } with recompute = block, for every strategy,
// worlds 1 to 8, accumulation, both precisions, forward and backward prefetch
// variants and with or without parameter offload: the invariants hold (the
// validation pass among them, its copies to the host included), every block's
// saved input goes to the host after its forward and comes back before its
// recompute, and the device peak is never above the same plan's without it
// (below it but for no_shard, whose peak the whole model's state sets).
TEST(Invariants, HoldWithActivationOffload) {
  int checked = 0, lower = 0;
  for (const char* st :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"})
    for (int w : {1, 2, 4, 8})
      for (auto [mb, red] : {std::pair{1, "every"}, {4, "every"}, {4, "last"}}) {
        const bool hybrid = std::string(st).rfind("hybrid", 0) == 0;
        if (hybrid && w < 4) continue;
        Config c;
        c.sharding = st;
        c.world = w;
        c.shard_group = hybrid ? w / 2 : 0;
        c.recompute = "block";
        c.offload_activations = true;
        c.offload = (checked % 3 == 0 && c.sharding != "no_shard") ? "cpu" : "none";
        c.micro_batches = mb;
        c.reduce = red;
        c.param = c.reduce_dtype = checked % 2 ? "bf16" : "fp32";
        c.backward = checked % 4 == 1 ? "post" : checked % 4 == 2 ? "none" : "pre";
        c.forward_prefetch = checked % 5 != 0;
        c.layers = 6;
        c.width = 128;
        const Planned p = plan_text(c.text());
        auto errors = verify_plan(p.schedule, p.memory);
        EXPECT_TRUE(errors.empty())
            << c.name() << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
        int to_host = 0, back = 0;
        for (const Op& op : p.schedule.ops) {
          if (op.segment < 0) continue;
          to_host += op.kind == OpKind::CopyD2H;
          back += op.kind == OpKind::CopyH2D;
          if (op.kind == OpKind::Recompute) {
            // Its saved input came back by a copy it waits for.
            const int saved = op.operand(Role::Saved);
            bool waits = false;
            for (int d : op.deps)
              waits = waits || (p.schedule.ops[d].kind == OpKind::CopyH2D &&
                                p.schedule.ops[d].operand(Role::Dst) == saved);
            EXPECT_TRUE(waits) << c.name() << ": " << op.label();
          }
        }
        EXPECT_EQ(to_host, 6 * mb) << c.name();
        EXPECT_EQ(back, 6 * mb) << c.name();
        Config kept = c;
        kept.offload_activations = false;
        const int64_t without = plan_text(kept.text()).memory.device_arena_bytes;
        EXPECT_LE(p.memory.device_arena_bytes, without) << c.name();
        lower += p.memory.device_arena_bytes < without;
        ++checked;
      }
  EXPECT_GT(checked, 40);
  // no_shard's peak holds the whole model's parameters and gradients, where
  // the saved inputs do not count; the sharded strategies' peaks fall.
  EXPECT_GE(lower, checked - 6) << lower << " of " << checked;
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

Planned offload_base() {
  Config c;
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.offload = "cpu";
  Planned p = plan_text(c.text());
  EXPECT_TRUE(verify_plan(p.schedule, p.memory).empty());
  return p;
}

TEST(Verifier, CatchesADeviceOpWaitingForTheHost) {
  Planned p = offload_base();
  // The first compute op after the first cross-replica all-reduce (on the host) waits for it.
  int host_ar = -1;
  for (Op& op : p.schedule.ops) {
    if (host_ar < 0 && op.kind == OpKind::AllReduce && runs_on_host(p.schedule, op))
      host_ar = op.id;
    if (host_ar >= 0 && op.kind == OpKind::Backward) {
      op.deps.push_back(host_ar);
      break;
    }
  }
  ASSERT_GE(host_ar, 0);
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "runs on the device but waits for"));
}

TEST(Verifier, CatchesAHostOpOnDeviceMemory) {
  Planned p = offload_base();
  int device_grads = -1;
  for (const Buffer& b : p.schedule.buffers)
    if (b.kind == BufferKind::UnshardedGrads) device_grads = b.id;
  for (Op& op : p.schedule.ops)
    if (op.kind == OpKind::GradNorm) op.uses.push_back(device_grads);
  EXPECT_TRUE(mentions(verify_plan(p.schedule, p.memory), "runs on the host but uses"));
}

}  // namespace
}  // namespace fsdpgen::test
