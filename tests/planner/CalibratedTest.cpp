// The cost model on hardware profiles (codegen/planner/Calibrated.h): hand-built
// schedules whose timelines from a synthetic profile are computed by hand
// (streams overlapping, dependencies, links shared), the lookups'
// interpolation, scaling and fallback, the compute section a plan uses, the
// calibration request of a real plan, and Muon's Newton-Schulz ops and
// point-to-point exchanges (send_recv).
#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "codegen/planner/Calibrated.h"
#include "codegen/planner/Cost.h"
#include "codegen/planner/Fit.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen {
namespace {

constexpr double kTol = 1e-9;  // ms
constexpr double kMs = 1e-3;   // seconds

// A 2-rank toy model (B=1, T=64, C=64, H=4, F=256, V=256) with three
// segments: the embedding, one block, the final norm and head.
Schedule toy_schedule() {
  Schedule s;
  Spec& spec = s.units.spec;
  spec.model.name = "toy";
  spec.model.vocab = 256;
  spec.model.context = 64;
  spec.model.width = 64;
  spec.model.heads = 4;
  spec.model.kv_heads = 4;
  spec.model.layers = 1;
  spec.model.ffn_hidden = 256;
  spec.parallel.world = 2;
  spec.parallel.shard_group = 2;
  spec.parallel.ranks_per_node = 2;
  spec.parallel.precision = {DType::FP32, DType::FP32, DType::FP32, {}};
  s.micro_batch = 1;
  LayerId embed{LayerId::Kind::Embed, 0}, block{LayerId::Kind::Block, 0},
      norm{LayerId::Kind::FinalNorm, 0}, head{LayerId::Kind::Head, 0};
  s.units.segments = {{0, {embed}, false}, {1, {block}, false}, {0, {norm, head}, true}};
  return s;
}

int add(Schedule& s, OpKind kind, StreamId stream, int segment, std::vector<int> deps = {},
        int64_t payload = 0) {
  Op op;
  op.id = static_cast<int>(s.ops.size());
  op.kind = kind;
  op.stream = stream;
  op.segment = segment;
  op.deps = std::move(deps);
  if (payload > 0) {
    op.group = CommGroup::Shard;
    op.group_size = 2;
    op.payload_bytes = payload;
  }
  s.ops.push_back(op);
  return op.id;
}

profile::LayerTime layer(const std::string& name, const std::string& pass, double seconds,
                         int64_t B = 1, int64_t C = 64) {
  return {"gpt2",
          name,
          pass,
          "fp32",
          pass == "backward" ? "fp32" : "",
          {{"B", B},
           {"T", 64},
           {"C", C},
           {"H", 4},
           {"F", 4 * C},
           {"V", 256},
           {"Vp", 256},
           {"flash", 0}},
          seconds,
          5};
}

// A profile of the toy: forward 1, 10, 3 ms and backward 2, 20, 6 ms for the
// embedding, block and head; 0.5 ms per op; all-gathers of 1 MiB take 4 ms
// and reduce-scatters of 1 MiB 2 ms.
profile::Profile toy_profile() {
  profile::Profile p;
  p.device = {"cpu", "toy", "cpu", 2, int64_t{1} << 30};
  profile::Compute c;
  c.ranks_per_node = 2;
  c.threads_per_rank = 1;
  c.op_overhead_s = 0.5 * kMs;
  c.layers = {layer("embed", "forward", 1 * kMs),   layer("block", "forward", 10 * kMs),
              layer("head", "forward", 3 * kMs),    layer("embed", "backward", 2 * kMs),
              layer("block", "backward", 20 * kMs), layer("head", "backward", 6 * kMs)};
  p.compute = {c};
  p.collectives = {{"all_gather", "fp32", 2, 1, 1 << 20, 4 * kMs, 5},
                   {"reduce_scatter", "fp32", 2, 1, 1 << 20, 2 * kMs, 5}};
  return p;
}

Hardware toy_hardware(profile::Profile p = toy_profile()) {
  return calibrated_hardware(std::move(p), "toy.json");
}

TEST(Calibrated, StreamsOverlapWithMeasuredTimes) {
  Schedule s = toy_schedule();
  const int ag0 = add(s, OpKind::AllGather, StreamId::AllGather, -1, {}, 1 << 20);
  const int f0 = add(s, OpKind::Forward, StreamId::Compute, 1, {ag0});  // block
  const int ag1 = add(s, OpKind::AllGather, StreamId::AllGather, -1, {}, 1 << 20);
  const int f1 = add(s, OpKind::Forward, StreamId::Compute, 2, {ag1});  // head
  const int b1 = add(s, OpKind::Backward, StreamId::Compute, 2);
  const int rs = add(s, OpKind::ReduceScatter, StreamId::ReduceScatter, -1, {b1}, 1 << 20);
  const int b0 = add(s, OpKind::Backward, StreamId::Compute, 1);
  const int b_embed = add(s, OpKind::Backward, StreamId::Compute, 0, {rs});
  const Timeline t = predict(s, toy_hardware());
  // ag0 0..4, f0 4..14.5 (10 + 0.5), ag1 4..8 (hidden), f1 14.5..18, b1 18..24.5,
  // rs 24.5..26.5 beside b0 24.5..45, b_embed 45..47.5.
  EXPECT_NEAR(t.ops[ag0].end_ms, 4, kTol);
  EXPECT_NEAR(t.ops[f0].start_ms, 4, kTol);
  EXPECT_NEAR(t.ops[f0].end_ms, 14.5, kTol);
  EXPECT_NEAR(t.ops[ag1].end_ms, 8, kTol);
  EXPECT_NEAR(t.ops[f1].end_ms, 18, kTol);
  EXPECT_NEAR(t.ops[b1].end_ms, 24.5, kTol);
  EXPECT_NEAR(t.ops[rs].start_ms, 24.5, kTol);
  EXPECT_NEAR(t.ops[rs].end_ms, 26.5, kTol);
  EXPECT_NEAR(t.ops[b0].end_ms, 45, kTol);
  EXPECT_NEAR(t.ops[b_embed].start_ms, 45, kTol);
  EXPECT_NEAR(t.step_ms, 47.5, kTol);
  EXPECT_NEAR(t.exposed_comm_ms, 4, kTol);  // the first all-gather only
  EXPECT_EQ(t.ops_measured, 8);
  EXPECT_EQ(t.ops_estimated, 0);
  EXPECT_NE(timeline_source(t).find("hardware profile toy.json"), std::string::npos)
      << timeline_source(t);
}

TEST(Calibrated, ConcurrentMeasuredCollectivesShareTheirLink) {
  // 1 ms of latency (the 4 KiB size) and 2 ms of bytes each at 1 MiB; side by
  // side on one link the bytes take twice as long: both end at 1 + 4 ms.
  profile::Profile p = toy_profile();
  p.collectives = {{"all_gather", "fp32", 2, 1, 4096, 1 * kMs, 5},
                   {"all_gather", "fp32", 2, 1, 1 << 20, 3 * kMs, 5},
                   {"reduce_scatter", "fp32", 2, 1, 4096, 1 * kMs, 5},
                   {"reduce_scatter", "fp32", 2, 1, 1 << 20, 3 * kMs, 5}};
  Schedule s = toy_schedule();
  const int ag = add(s, OpKind::AllGather, StreamId::AllGather, -1, {}, 1 << 20);
  const int rs = add(s, OpKind::ReduceScatter, StreamId::ReduceScatter, -1, {}, 1 << 20);
  const Timeline shared = predict(s, toy_hardware(p));
  EXPECT_NEAR(shared.ops[ag].end_ms, 5, kTol);
  EXPECT_NEAR(shared.ops[rs].end_ms, 5, kTol);
  const Timeline alone = predict(s, toy_hardware(p), {.share_links = false});
  EXPECT_NEAR(alone.ops[ag].end_ms, 3, kTol);
}

// With contention entries (a CPU profile), a collective and the compute beside
// it each go at the measured fraction of their speed alone: here the block's
// backward (20 ms + 0.5 ms) at 1/2 and the reduce-scatter (2 ms) at 1/4.
TEST(Calibrated, CollectivesAndComputeAtOnceSlowEachOtherAsMeasured) {
  profile::Profile p = toy_profile();
  // Beside each other: the pass takes 40 ms (20 alone), a call 8 ms (2 alone).
  profile::LayerTime beside = p.compute[0].layers[4];  // block backward
  beside.seconds = 40 * kMs;
  p.contention = {{{"reduce_scatter", "fp32", 2, 1, 1 << 20, 8 * kMs, 5}, beside}};
  Schedule s = toy_schedule();
  const int rs = add(s, OpKind::ReduceScatter, StreamId::ReduceScatter, -1, {}, 1 << 20);
  const int b0 = add(s, OpKind::Backward, StreamId::Compute, 1);
  const int rs2 = add(s, OpKind::ReduceScatter, StreamId::ReduceScatter, -1, {b0}, 1 << 20);
  const Timeline t = predict(s, toy_hardware(p));
  // rs 0..8 at a quarter of its speed; b0 does 4 of its 20.5 ms meanwhile,
  // the other 16.5 alone: 0..24.5; rs2 alone 24.5..26.5.
  EXPECT_NEAR(t.ops[rs].end_ms, 8, kTol);
  EXPECT_NEAR(t.ops[b0].end_ms, 24.5, kTol);
  EXPECT_NEAR(t.ops[rs2].end_ms, 26.5, kTol);
  const Timeline apart = predict(s, toy_hardware(p), {.contention = false});
  EXPECT_NEAR(apart.ops[rs].end_ms, 2, kTol);
  EXPECT_NEAR(apart.ops[b0].end_ms, 20.5, kTol);
  // A profile without its entries' alone times, or another op's entry, changes nothing.
  p.contention[0].collective.bytes = 4096;
  EXPECT_NEAR(predict(s, toy_hardware(p)).ops[b0].end_ms, 20.5, kTol);
  p.contention[0].collective = {"all_gather", "fp32", 2, 1, 1 << 20, 8 * kMs, 5};
  EXPECT_NEAR(predict(s, toy_hardware(p)).ops[b0].end_ms, 20.5, kTol);
}

TEST(Calibrated, LookupsInterpolateScaleAndFallBack) {
  profile::Profile p = toy_profile();
  p.compute[0].layers = {layer("block", "forward", 2 * kMs, 2),
                         layer("block", "forward", 3 * kMs, 4)};
  p.compute[0].elementwise = {{"adamw", "fp32", 1000, 1 * kMs, 5},
                              {"adamw", "fp32", 3000, 2 * kMs, 5}};
  p.copies = {{"h2d", 1000, 1 * kMs, 5}};
  const CalibratedTimes times(p, 2);
  auto ms = [](const Looked& l) { return l.seconds / kMs; };
  EXPECT_EQ(times.layer(layer("block", "forward", 0, 4)).how, Lookup::Measured);
  const Looked mid = times.layer(layer("block", "forward", 0, 3));
  EXPECT_EQ(mid.how, Lookup::Interpolated);
  EXPECT_NEAR(ms(mid), 2.5, kTol);
  // Beyond the measured sizes, the line through the nearest two (5 ms at B=8),
  // below them never less than proportional (at B=1 the line gives 1.5).
  EXPECT_NEAR(ms(times.layer(layer("block", "forward", 0, 8))), 5, kTol);
  EXPECT_NEAR(ms(times.layer(layer("block", "forward", 0, 1))), 1.5, kTol);
  // Another width: the nearest measured shape scaled by the FLOPs.
  const Looked wide = times.layer(layer("block", "forward", 0, 4, 128));
  EXPECT_EQ(wide.how, Lookup::Scaled);
  EXPECT_GT(ms(wide), 3 * 3);  // C doubled: GEMM FLOPs x4, attention x2
  EXPECT_LT(ms(wide), 3 * 4);
  EXPECT_EQ(times.layer(layer("head", "forward", 0)).how, Lookup::Missing);
  EXPECT_NEAR(ms(times.elementwise({"adamw", "fp32", 2000, 0, 0})), 1.5, kTol);
  EXPECT_EQ(times.elementwise({"sgd", "fp32", 2000, 0, 0}).how, Lookup::Missing);
  EXPECT_NEAR(ms(times.copy("h2d", 4000)), 4, kTol);  // one size: proportional
  EXPECT_EQ(times.copy("d2h", 4000).how, Lookup::Missing);
  // A collective in another dtype moves the same bytes; its latency is the
  // smallest size's time.
  const Looked ag = times.collective("all_gather", DType::BF16, 2, 1, 1 << 20);
  EXPECT_EQ(ag.how, Lookup::Measured);
  EXPECT_NEAR(ms(ag), 4, kTol);
  EXPECT_EQ(times.collective("all_gather", DType::FP32, 4, 1, 1 << 20).how, Lookup::Missing);
}

TEST(Calibrated, OpsTheProfileLacksTakeTheBuiltInFigures) {
  Schedule s = toy_schedule();
  const int f = add(s, OpKind::Forward, StreamId::Compute, 1);
  s.ops[f].flops = 1e9;
  profile::Profile p = toy_profile();
  p.compute[0].layers.clear();
  const Timeline t = predict(s, toy_hardware(p));
  const Timeline builtin = predict(s, *find_hardware("cpu"));
  EXPECT_EQ(t.ops_estimated, 1);
  EXPECT_NEAR(t.step_ms, builtin.step_ms, kTol);
  EXPECT_NE(timeline_source(t).find("1 not in the profile"), std::string::npos)
      << timeline_source(t);
}

TEST(Calibrated, PlansUseTheComputeSectionOfTheirRanksPerNode) {
  profile::Profile p = toy_profile();
  profile::Compute one = p.compute[0];
  one.ranks_per_node = 1;
  for (profile::LayerTime& l : one.layers)
    l.seconds /= 2;
  p.compute.insert(p.compute.begin(), one);
  EXPECT_EQ(CalibratedTimes(p, 1).compute().ranks_per_node, 1);
  EXPECT_EQ(CalibratedTimes(p, 2).compute().ranks_per_node, 2);
  const CalibratedTimes four(p, 4);
  EXPECT_EQ(four.compute().ranks_per_node, 2);
  EXPECT_FALSE(four.placement_exact());
  Schedule s = toy_schedule();
  add(s, OpKind::Forward, StreamId::Compute, 1);
  EXPECT_NEAR(predict(s, toy_hardware(p)).step_ms, 10.5, kTol);
  s.units.spec.parallel.world = 1;  // one rank on the node: the section measured alone
  EXPECT_NEAR(predict(s, toy_hardware(p)).step_ms, 5.5, kTol);
}

TEST(Calibrated, ProfilesMustDescribeHardwareThatExists) {
  profile::Profile p = toy_profile();
  p.device.base = "a100";
  try {
    calibrated_hardware(p, "p.json");
    FAIL() << "no error";
  } catch (const profile::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: device.base: unknown hardware 'a100'"),
              std::string::npos)
        << e.what();
  }
  p.device.base = "h100-sxm";  // a CPU profile on a GPU's figures
  EXPECT_THROW(calibrated_hardware(p, "p.json"), profile::ProfileError);
  EXPECT_THROW(hardware_named("no-such-gpu"), std::invalid_argument);
  EXPECT_THROW(hardware_named("/nonexistent/p.json"), profile::ProfileError);
}

// A calibration request for tiny at 2 ranks asks for every layer pass, every
// element-wise op, collective and copy of the plan, each once, in two compute
// sections; a profile that answers it predicts every op from measurements.
TEST(Calibrated, RequestCoversEveryOpOfThePlan) {
  const std::string text = R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 4 }
units { each block }
parallel { world = 2 sharding = full_shard precision { param = fp32 reduce = fp32 master = fp32 } }
train { optimizer = adamw(lr = 1e-3) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }
)";
  test::Planned planned = test::plan_text(text);
  const Hardware cpu = *find_hardware("cpu");
  const Schedule& s = planned.schedule;
  profile::Profile r = calibration_request({s}, cpu, 2, "tiny");
  ASSERT_EQ(r.compute.size(), 2u);
  EXPECT_EQ(r.compute[0].ranks_per_node, 1);
  EXPECT_EQ(r.compute[1].ranks_per_node, 2);
  EXPECT_EQ(r.device.base, "cpu");
  // forward, backward of embed, block and head: 6 layer passes.
  EXPECT_EQ(r.compute[0].layers.size(), 6u);
  std::set<std::string> seen;
  for (const profile::CollectiveTime& c : r.collectives)
    EXPECT_TRUE(seen.insert(fmt::format("{} {} {}", c.op, c.ranks, c.bytes)).second);
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::AllGather) continue;
    EXPECT_TRUE(seen.count(fmt::format("all_gather 2 {}", op.payload_bytes))) << op.label();
  }
  // On a CPU, each collective op's largest payload beside the block's backward.
  std::map<std::string, int64_t> largest;
  for (const Op& op : s.ops)
    if (op.kind == OpKind::AllGather || op.kind == OpKind::ReduceScatter ||
        op.kind == OpKind::AllReduce)
      largest[std::string(profile_op_name(op.kind))] =
          std::max(largest[std::string(profile_op_name(op.kind))], op.payload_bytes);
  ASSERT_EQ(r.contention.size(), 3u);
  for (const profile::ContentionTime& c : r.contention) {
    EXPECT_EQ(c.collective.bytes, largest.at(c.collective.op)) << c.collective.op;
    EXPECT_EQ(c.collective.ranks, 2);
    EXPECT_TRUE(seen.count(fmt::format("{} 2 {}", c.collective.op, c.collective.bytes)));
    EXPECT_EQ(c.layer.layer, "block");
    EXPECT_EQ(c.layer.pass, "backward");
  }
  EXPECT_TRUE(calibration_request({s}, cpu, 1, "tiny").contention.empty());  // no group of 1
  EXPECT_TRUE(calibration_request({s}, *find_hardware("h100-sxm"), 2, "tiny").contention.empty());
  // Answer it with 1 ms per entry: every op is then measured.
  for (profile::Compute& c : r.compute) {
    c.op_overhead_s = 1e-5;
    for (auto& l : c.layers)
      l.seconds = kMs, l.runs = 1;
    for (auto& e : c.elementwise)
      e.seconds = kMs, e.runs = 1;
  }
  for (auto& c : r.collectives)
    c.seconds = kMs, c.runs = 1;
  for (auto& c : r.copies)
    c.seconds = kMs, c.runs = 1;
  const Timeline t = predict(s, calibrated_hardware(r, "r.json"));
  const int free_ops = static_cast<int>(std::count_if(
      s.ops.begin(), s.ops.end(), [](const Op& op) { return op.kind == OpKind::Free; }));
  EXPECT_EQ(t.ops_measured, static_cast<int>(s.ops.size()) - free_ops);
  EXPECT_EQ(t.ops_estimated + t.ops_scaled + t.ops_interpolated, 0);
}

// Sub-block units: each op runs its pieces' share of the measured block pass
// (by FLOPs), so a block's forward ops together cost one block pass, its
// backward ops one backward pass; the request asks for the block's passes once.
TEST(Calibrated, PiecesOfABlockShareItsMeasuredPass) {
  const std::string text = R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 2 }
units { each linear }
parallel { world = 2 sharding = full_shard precision { param = fp32 reduce = fp32 master = fp32 } }
train { optimizer = adamw(lr = 1e-3) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }
)";
  test::Planned planned = test::plan_text(text);
  const Schedule& s = planned.schedule;
  std::map<std::pair<int64_t, std::string>, double> shares;  // (block, pass) -> share
  for (const Op& op : s.ops)
    for (const OpLayerPass& l : op_layer_passes(s, op))
      if (l.key.layer == "block") {
        const LayerId& first = s.units.segments.at(op.segment).layers.front();
        shares[{first.block, l.key.pass}] += l.share;
      }
  ASSERT_EQ(shares.size(), 4u);  // 2 blocks x forward, backward
  for (const auto& [key, share] : shares)
    EXPECT_NEAR(share, 1.0, 1e-12) << key.first << " " << key.second;
  profile::Profile r = calibration_request({s}, *find_hardware("cpu"), 2, "tiny");
  EXPECT_EQ(r.compute[0].layers.size(), 6u);  // embed, block, head x forward, backward
}

TEST(Calibrated, RequestsSkipGroupsThatSpanNodes) {
  const std::string text = R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 2 }
units { each block }
parallel { world = 16 ranks_per_node = 8 sharding = full_shard }
train { optimizer = adamw(lr = 1e-3) micro_batch = 1 steps = 20 data = synthetic(seed = 1) }
)";
  test::Planned planned = test::plan_text(text);
  profile::Profile r = calibration_request({planned.schedule}, *find_hardware("cpu"), 8, "x");
  for (const profile::CollectiveTime& c : r.collectives)
    EXPECT_LE(c.ranks, 8) << c.op;
}

// A request for 2 nodes of 2 ranks lists the collectives of groups across
// them with the nodes they span: full_shard's 4 ranks on 2 nodes, and
// hybrid_shard's replica groups of one rank on each node beside its shard
// groups of one node; for one node, neither.
TEST(Calibrated, RequestsForSeveralNodesMeasureGroupsAcrossThem) {
  auto request = [](const std::string& sharding, int64_t nodes) {
    test::Planned planned = test::plan_text(fmt::format(R"(
model tiny {{ family = gpt2 vocab = 256 context = 32 width = 32 heads = 2 layers = 2 }}
units {{ each block }}
parallel {{ world = 4 ranks_per_node = 2 sharding = {} }}
train {{ optimizer = adamw(lr = 1e-3) micro_batch = 2 steps = 20 data = synthetic(seed = 1) }}
)",
                                                        sharding));
    return calibration_request({planned.schedule}, *find_hardware("cpu"), 2, "x", nodes);
  };
  auto groups = [](const profile::Profile& r) {
    std::set<std::tuple<std::string, int64_t, int64_t>> g;
    for (const profile::CollectiveTime& c : r.collectives)
      g.insert({c.op, c.ranks, c.nodes});
    return g;
  };
  using G = std::set<std::tuple<std::string, int64_t, int64_t>>;
  EXPECT_EQ(groups(request("full_shard", 2)),
            (G{{"all_gather", 4, 2}, {"reduce_scatter", 4, 2}, {"all_reduce", 4, 2}}));
  // The shard groups' all-gathers, reduce-scatters and norm all-reduce on a
  // node; the replicas' gradient all-reduce across the 2.
  EXPECT_EQ(groups(request("hybrid_shard", 2)), (G{{"all_gather", 2, 1},
                                                   {"reduce_scatter", 2, 1},
                                                   {"all_reduce", 2, 1},
                                                   {"all_reduce", 2, 2}}));
  EXPECT_TRUE(groups(request("full_shard", 1)).empty());
  EXPECT_EQ(groups(request("hybrid_shard", 1)),
            (G{{"all_gather", 2, 1}, {"reduce_scatter", 2, 1}, {"all_reduce", 2, 1}}));
}

// tiny with Muon at `ns` (ns_steps and ns_dtype), on 2 ranks: four matrix
// shapes a block, owners on both ranks.
std::string muon_spec(const std::string& ns) {
  return fmt::format(R"(
model tiny {{ family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 4 }}
units {{ each block }}
parallel {{ world = 2 sharding = full_shard precision {{ param = fp32 reduce = fp32 master = fp32 }} }}
train {{ optimizer = muon(lr = 0.02, {}) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }}
)",
                     ns);
}

// The request lists, in each compute section, every (rows, cols) a rank owns
// in the plan (codegen/planner/Muon.h's plan, made again here), once, at the
// spec's ns_steps and ns_dtype.
TEST(Calibrated, RequestListsEveryMatrixARankOwns) {
  for (const auto& [ns, steps, dtype] : {std::tuple{"ns_steps = 5", 5, "fp32"},
                                         std::tuple{"ns_steps = 3, ns_dtype = bf16", 3, "bf16"}}) {
    test::Planned planned = test::plan_text(muon_spec(ns));
    const MuonPlan plan = plan_muon(planned.units, steps);
    std::set<std::pair<int64_t, int64_t>> owned;
    std::set<int64_t> owners;
    for (size_t u = 0; u < plan.matrices.size(); ++u)
      for (size_t i = 0; i < plan.matrices[u].size(); ++i) {
        owned.insert({plan.matrices[u][i].rows, plan.matrices[u][i].cols});
        owners.insert(plan.owners[u].matrices[i].owner);
      }
    ASSERT_EQ(owned.size(), 4u) << ns;  // c_attn, attn.c_proj, c_fc, mlp.c_proj
    EXPECT_EQ(owners, (std::set<int64_t>{0, 1})) << ns;
    const profile::Profile r =
        calibration_request({planned.schedule}, *find_hardware("cpu"), 2, "tiny-muon");
    ASSERT_EQ(r.compute.size(), 2u);
    for (const profile::Compute& c : r.compute) {
      std::set<std::pair<int64_t, int64_t>> requested;
      for (const profile::MuonNsTime& m : c.muon_ns) {
        EXPECT_TRUE(requested.insert({m.rows, m.cols}).second) << m.rows << "x" << m.cols;
        EXPECT_EQ(m.ns_steps, steps);
        EXPECT_EQ(m.ns_dtype, dtype);
        EXPECT_EQ(m.seconds, 0);
      }
      EXPECT_EQ(requested, owned) << ns;
    }
  }
  // AdamW runs no Newton-Schulz.
  test::Planned plain = test::plan_text(R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 4 }
units { each block }
parallel { world = 2 sharding = full_shard }
train { optimizer = adamw(lr = 1e-3) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }
)");
  EXPECT_TRUE(calibration_request({plain.schedule}, *find_hardware("cpu"), 2, "x")
                  .compute[0]
                  .muon_ns.empty());
}

profile::MuonNsTime ns_entry(int64_t rows, int64_t cols, double seconds, int64_t steps = 5,
                             const std::string& dtype = "fp32") {
  return {rows, cols, steps, dtype, seconds, 3};
}

TEST(Calibrated, MuonLookupsAreExactOrScaledByFlops) {
  profile::Profile p = toy_profile();
  p.compute[0].muon_ns = {ns_entry(128, 128, 1 * kMs), ns_entry(128, 512, 3 * kMs),
                          ns_entry(64, 64, 7 * kMs, 5, "bf16")};
  const CalibratedTimes times(p, 2);
  const Looked exact = times.muon_ns(ns_entry(128, 512, 0));
  EXPECT_EQ(exact.how, Lookup::Measured);
  EXPECT_DOUBLE_EQ(exact.seconds, 3 * kMs);
  // (128, 384) is nearest (128, 512) in FLOPs: its time times the ratio.
  const Looked other = times.muon_ns(ns_entry(128, 384, 0));
  EXPECT_EQ(other.how, Lookup::Scaled);
  EXPECT_NEAR(other.seconds, 3 * kMs * muon_ns_flops(128, 384, 5) / muon_ns_flops(128, 512, 5),
              1e-15);
  // Other iteration counts scale by the FLOPs too; other dtypes are not comparable.
  const Looked steps = times.muon_ns(ns_entry(128, 128, 0, 10));
  EXPECT_EQ(steps.how, Lookup::Scaled);
  EXPECT_NEAR(steps.seconds, 2 * kMs, 1e-15);
  EXPECT_EQ(times.muon_ns(ns_entry(128, 128, 0, 5, "bf16")).how, Lookup::Scaled);
  EXPECT_NEAR(times.muon_ns(ns_entry(128, 128, 0, 5, "bf16")).seconds, 7 * kMs * 8, 1e-15);
  p.compute[0].muon_ns.pop_back();
  EXPECT_EQ(CalibratedTimes(p, 2).muon_ns(ns_entry(64, 64, 0, 5, "bf16")).how, Lookup::Missing);
  EXPECT_EQ(CalibratedTimes(p, 2).muon_ns(ns_entry(64, 64, 0, 0)).how, Lookup::Missing);
}

// A plan's MUON_NS ops take the op overhead plus the slowest owner's
// matrices from the profile: the hand-written seconds where the shape was
// measured, FLOP-scaled where only another was; without entries, the built-in figures.
TEST(Calibrated, MuonOpsTakeTheirOwnersMeasuredTimes) {
  test::Planned planned = test::plan_text(muon_spec("ns_steps = 5"));
  const Schedule& s = planned.schedule;
  const MuonPlan plan = plan_muon(planned.units, 5);
  const std::map<std::pair<int64_t, int64_t>, double> written = {
      {{128, 384}, 2 * kMs}, {{128, 128}, 1 * kMs}, {{128, 512}, 3 * kMs}, {{512, 128}, 5 * kMs}};
  profile::Profile p = toy_profile();
  p.compute[0].layers.clear();
  for (const auto& [shape, seconds] : written)
    p.compute[0].muon_ns.push_back(ns_entry(shape.first, shape.second, seconds));
  // The slowest owner's sum of `seconds_of` its unit's matrices, in ms.
  auto expected_ms = [&](int unit, const std::function<double(const MuonMatrix&)>& seconds_of) {
    std::map<int64_t, double> owner;
    for (size_t i = 0; i < plan.matrices[unit].size(); ++i)
      owner[plan.owners[unit].matrices[i].owner] += seconds_of(plan.matrices[unit][i]);
    double slowest = 0;
    for (const auto& [r, sec] : owner)
      slowest = std::max(slowest, sec);
    return (0.5 * kMs + slowest) / kMs;
  };
  const Timeline measured = predict(s, toy_hardware(p));
  int ns_ops = 0;
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::MuonOrthogonalize) continue;
    ++ns_ops;
    EXPECT_NEAR(measured.ops[op.id].ms(),
                expected_ms(op.unit,
                            [&](const MuonMatrix& m) {
                              return written.at({m.rows, m.cols});
                            }),
                kTol)
        << op.label();
  }
  EXPECT_EQ(ns_ops, 4);
  // Only (128, 128) measured: the others scaled from it by their FLOPs.
  profile::Profile one = p;
  one.compute[0].muon_ns = {ns_entry(128, 128, 1 * kMs)};
  const Timeline scaled = predict(s, toy_hardware(one));
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::MuonOrthogonalize) continue;
    EXPECT_NEAR(scaled.ops[op.id].ms(),
                expected_ms(op.unit,
                            [](const MuonMatrix& m) {
                              return 1 * kMs * muon_ns_flops(m.rows, m.cols, 5) /
                                     muon_ns_flops(128, 128, 5);
                            }),
                kTol)
        << op.label();
  }
  EXPECT_EQ(scaled.ops_scaled, measured.ops_scaled + ns_ops);
  // None: the built-in figures, as before Muon was calibrated.
  profile::Profile none = p;
  none.compute[0].muon_ns.clear();
  const Timeline builtin = predict(s, toy_hardware(none));
  EXPECT_EQ(builtin.ops_estimated, measured.ops_estimated + ns_ops);
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::MuonOrthogonalize) continue;
    EXPECT_NEAR(builtin.ops[op.id].ms(), op_seconds(s, op, *find_hardware("cpu")) / kMs, kTol);
  }
}

// The request lists each of a Muon plan's exchanges (MUON_GATHER of the
// gradient slices, MUON_SCATTER of the fp32 updates) as a send_recv over its
// shard group at its payload, with the sweep of sizes; AdamW's none.
TEST(Calibrated, RequestListsMuonsExchangesAsSendRecv) {
  test::Planned planned = test::plan_text(muon_spec("ns_steps = 5"));
  const Schedule& s = planned.schedule;
  const profile::Profile r = calibration_request({s}, *find_hardware("cpu"), 2, "tiny-muon");
  auto requested = [&](const std::string& dtype, int64_t ranks, int64_t bytes) {
    return std::count_if(r.collectives.begin(), r.collectives.end(), [&](const auto& c) {
      return c.op == "send_recv" && c.dtype == dtype && c.ranks == ranks && c.nodes == 1 &&
             c.bytes == bytes && c.seconds == 0;
    });
  };
  int exchanges = 0;
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::MuonGather && op.kind != OpKind::MuonScatter) continue;
    ++exchanges;
    EXPECT_EQ(op.group_size, 2) << op.label();
    ASSERT_GT(op.payload_bytes, 0) << op.label();
    EXPECT_EQ(requested("fp32", 2, op.payload_bytes), 1) << op.label();
  }
  EXPECT_EQ(exchanges, 8);  // a gather and a scatter per block
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 20})
    EXPECT_EQ(requested("fp32", 2, bytes), 1) << bytes;
  // A bf16 gradient shard is gathered in bf16; the updates stay fp32.
  test::Planned bf16 = test::plan_text(R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 4 }
units { each block }
parallel { world = 2 sharding = full_shard precision { param = bf16 reduce = bf16 master = fp32 } }
train { optimizer = muon(lr = 0.02) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }
)");
  const profile::Profile rb =
      calibration_request({bf16.schedule}, *find_hardware("cpu"), 2, "tiny-muon");
  std::set<std::string> dtypes;
  for (const profile::CollectiveTime& c : rb.collectives)
    if (c.op == "send_recv") dtypes.insert(c.dtype);
  EXPECT_EQ(dtypes, (std::set<std::string>{"bf16", "fp32"}));
  for (const Op& op : bf16.schedule.ops)
    if (op.kind == OpKind::MuonGather || op.kind == OpKind::MuonScatter) {
      EXPECT_EQ(std::count_if(rb.collectives.begin(), rb.collectives.end(),
                              [&](const auto& c) {
                                return c.op == "send_recv" && c.bytes == op.payload_bytes &&
                                       c.dtype == (op.kind == OpKind::MuonGather ? "bf16" : "fp32");
                              }),
                1)
          << op.label();
    }
  test::Planned plain = test::plan_text(R"(
model tiny { family = gpt2 vocab = 256 context = 128 width = 128 heads = 4 layers = 4 }
units { each block }
parallel { world = 2 sharding = full_shard }
train { optimizer = adamw(lr = 1e-3) micro_batch = 8 steps = 20 data = synthetic(seed = 1) }
)");
  for (const profile::CollectiveTime& c :
       calibration_request({plain.schedule}, *find_hardware("cpu"), 2, "x").collectives)
    EXPECT_NE(c.op, "send_recv");
}

// An exchange takes the profile's send_recv time like a collective: its
// smallest size as the latency, the rest as bytes (interpolated between
// sizes); another op's entries or another group size are not comparable.
TEST(Calibrated, MuonExchangesTakeTheProfilesSendRecvTimes) {
  profile::Profile p = toy_profile();
  p.collectives = {{"send_recv", "fp32", 2, 1, 4096, 1 * kMs, 5},
                   {"send_recv", "fp32", 2, 1, 1 << 20, 3 * kMs, 5}};
  Schedule s = toy_schedule();
  const int gather = add(s, OpKind::MuonGather, StreamId::AllGather, -1, {}, 1 << 20);
  const int scatter = add(s, OpKind::MuonScatter, StreamId::ReduceScatter, -1, {gather}, 1 << 19);
  const Timeline t = predict(s, toy_hardware(p));
  EXPECT_NEAR(t.ops[gather].ms(), 3, kTol);
  // Half way in bytes: 1 + (3 - 1) * (512 - 4) / (1024 - 4) ms.
  EXPECT_NEAR(t.ops[scatter].ms(), 1 + 2.0 * (512 - 4) / (1024 - 4), kTol);
  EXPECT_EQ(t.ops_measured, 1);
  EXPECT_EQ(t.ops_interpolated, 1);
  EXPECT_EQ(t.ops_estimated, 0);
  for (profile::CollectiveTime& c : p.collectives)
    c.op = "all_gather";
  const Timeline builtin = predict(s, toy_hardware(p));
  EXPECT_EQ(builtin.ops_estimated, 2);
  EXPECT_NEAR(builtin.ops[gather].ms(), op_seconds(s, s.ops[gather], *find_hardware("cpu")) / kMs,
              kTol);
}

// In a real Muon plan every exchange is priced from the profile: with the
// plan's payloads written, each is Measured; without send_recv entries they
// take the built-in figures, as before the exchanges were calibrated.
TEST(Calibrated, MuonPlansExchangesAreMeasured) {
  test::Planned planned = test::plan_text(muon_spec("ns_steps = 5"));
  const Schedule& s = planned.schedule;
  profile::Profile p = toy_profile();
  p.compute[0].layers.clear();
  std::map<int64_t, double> written;  // payload -> seconds
  p.collectives.push_back({"send_recv", "fp32", 2, 1, 4096, 0.01 * kMs, 5});
  for (const Op& op : s.ops)
    if (op.kind == OpKind::MuonGather || op.kind == OpKind::MuonScatter)
      if (written.emplace(op.payload_bytes, (0.1 + 0.01 * written.size()) * kMs).second)
        p.collectives.push_back(
            {"send_recv", "fp32", 2, 1, op.payload_bytes, written[op.payload_bytes], 5});
  ASSERT_FALSE(written.empty());
  const Timeline measured = predict(s, toy_hardware(p), {.share_links = false});
  int exchanges = 0;
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::MuonGather && op.kind != OpKind::MuonScatter) continue;
    ++exchanges;
    EXPECT_NEAR(measured.ops[op.id].ms(), written.at(op.payload_bytes) / kMs, kTol) << op.label();
  }
  EXPECT_EQ(exchanges, 8);
  profile::Profile none = p;
  std::erase_if(none.collectives, [](const auto& c) { return c.op == "send_recv"; });
  const Timeline builtin = predict(s, toy_hardware(none), {.share_links = false});
  EXPECT_EQ(builtin.ops_estimated, measured.ops_estimated + exchanges);
  EXPECT_EQ(measured.ops_measured, builtin.ops_measured + exchanges);
  for (const Op& op : s.ops)
    if (op.kind == OpKind::MuonGather || op.kind == OpKind::MuonScatter) {
      EXPECT_NEAR(builtin.ops[op.id].ms(), op_seconds(s, op, *find_hardware("cpu")) / kMs, kTol)
          << op.label();
    }
}

}  // namespace
}  // namespace fsdpgen
