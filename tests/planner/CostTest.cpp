// Cost model tests: hand-built schedules whose timelines are computed by
// hand (overlap, dependencies, ring formula, link sharing, MFU), the trace
// format, the hardware table, and a whole planned schedule.
#include <cmath>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "codegen/planner/Cost.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/Hardware.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Planner.h"
#include "codegen/planner/Schedule.h"
#include "dsl/Frontend.h"

namespace fsdpgen {
namespace {

constexpr double kTol = 1e-9;  // ms

// Round figures: bf16 at 1 TFLOP/s with efficiency exactly 0.5 (no
// half-size term), 1 GB/s intra-node, 0.25 GB/s inter-node, no latencies.
Hardware toy_hardware() {
  Hardware h;
  h.name = "toy";
  h.peak_bf16_flops = h.peak_fp16_flops = 1e12;
  h.peak_fp32_flops = 0.5e12;
  h.gemm_max_efficiency = 0.5;
  h.gemm_half_flops = 0;
  h.memory_bytes = int64_t{1} << 30;
  h.memory_bytes_per_s = 1e10;
  h.intra_node = {1e9, 0};
  h.inter_node = {0.25e9, 0};
  h.host_link_bytes_per_s = 1e9;
  h.host_memory_bytes_per_s = 1e9;
  return h;
}

Schedule empty_schedule(int64_t world, int64_t shard_group, int64_t ranks_per_node) {
  Schedule s;
  Spec& spec = s.units.spec;
  spec.model.name = "toy";
  spec.model.vocab = 256;
  spec.model.context = 64;
  spec.model.width = 64;
  spec.model.heads = 4;
  spec.model.kv_heads = 4;
  spec.model.layers = 2;
  spec.model.ffn_hidden = 256;
  spec.parallel.world = world;
  spec.parallel.shard_group = shard_group;
  spec.parallel.ranks_per_node = ranks_per_node;
  spec.parallel.precision = {DType::BF16, DType::BF16, DType::FP32, {}};
  spec.train.micro_batch = 1;
  s.micro_batch = 1;
  return s;
}

int add(Schedule& s, OpKind kind, StreamId stream, std::vector<int> deps = {}) {
  Op op;
  op.id = static_cast<int>(s.ops.size());
  op.kind = kind;
  op.stream = stream;
  op.deps = std::move(deps);
  s.ops.push_back(op);
  return op.id;
}

// A compute op of `ms` milliseconds on toy_hardware() (bf16, efficiency 0.5).
int compute(Schedule& s, OpKind kind, double ms, std::vector<int> deps = {}) {
  int id = add(s, kind, StreamId::Compute, std::move(deps));
  s.ops[id].flops = ms * 1e-3 * 0.5e12;
  return id;
}

// A collective over the shard group whose ring transfer takes `ms` at 1 GB/s.
int collective(Schedule& s, OpKind kind, StreamId stream, double ms, std::vector<int> deps = {}) {
  int id = add(s, kind, stream, std::move(deps));
  Op& op = s.ops[id];
  op.group = CommGroup::Shard;
  op.group_size = s.units.spec.parallel.shard_group;
  const double n = static_cast<double>(op.group_size);
  op.payload_bytes = static_cast<int64_t>(std::llround(ms * 1e-3 * 1e9 * n / (n - 1)));
  return id;
}

// Attention FLOPs count each query against the context's keys, or in a
// sliding window shorter than it against the window's (what the windowed
// kernel does past the first N queries); a window of the context is plain.
TEST(Flops, ASlidingWindowCountsItsKeys) {
  ModelSpec m;
  m.family = Family::Llama;
  m.vocab = 256;
  m.context = 64;
  m.width = 32;
  m.heads = 4;
  m.kv_heads = 2;
  m.layers = 2;
  m.ffn_hidden = 88;
  const double plain = model_flops_per_token(m);
  m.sliding_window = 64;
  EXPECT_EQ(model_flops_per_token(m), plain);
  m.sliding_window = 16;
  // 2 layers, forward and backward (3x), 4 FLOPs per key and q column, 48 keys fewer.
  EXPECT_DOUBLE_EQ(plain - model_flops_per_token(m), 2 * 3 * 4.0 * (64 - 16) * 32);
}

TEST(Cost, TwoStreamsOverlapAndExposedCommunication) {
  Schedule s = empty_schedule(2, 2, 2);
  int ag0 = collective(s, OpKind::AllGather, StreamId::AllGather, 4);
  int f0 = compute(s, OpKind::Forward, 10, {ag0});
  int ag1 =
      collective(s, OpKind::AllGather, StreamId::AllGather, 4);  // prefetched: hidden under f0
  int f1 = compute(s, OpKind::Forward, 10, {ag1});
  int rs = collective(s, OpKind::ReduceScatter, StreamId::ReduceScatter, 4, {f1});
  int fr = add(s, OpKind::Free, StreamId::Compute, {rs});
  Timeline t = predict(s, toy_hardware());
  EXPECT_NEAR(t.ops[ag0].start_ms, 0, kTol);
  EXPECT_NEAR(t.ops[ag0].end_ms, 4, kTol);
  EXPECT_NEAR(t.ops[f0].start_ms, 4, kTol);
  EXPECT_NEAR(t.ops[ag1].start_ms, 4, kTol);
  EXPECT_NEAR(t.ops[ag1].end_ms, 8, kTol);
  EXPECT_NEAR(t.ops[f1].start_ms, 14, kTol);
  EXPECT_NEAR(t.ops[rs].start_ms, 24, kTol);
  EXPECT_NEAR(t.ops[fr].start_ms, 28, kTol);
  EXPECT_NEAR(t.ops[fr].end_ms, 28, kTol);
  EXPECT_NEAR(t.step_ms, 28, kTol);
  EXPECT_NEAR(t.compute_ms, 20, kTol);
  EXPECT_NEAR(t.comm_ms, 12, kTol);
  EXPECT_NEAR(t.exposed_comm_ms, 8, kTol);  // the first all-gather and the reduce-scatter
  EXPECT_NEAR(t.stream_busy_ms[static_cast<int>(StreamId::AllGather)], 8, kTol);
}

TEST(Cost, PartlyHiddenCommunicationCountsOnlyTheUncoveredPart) {
  Schedule s = empty_schedule(2, 2, 2);
  compute(s, OpKind::Forward, 3);
  int ag = collective(s, OpKind::AllGather, StreamId::AllGather, 5);  // 0..5, compute covers 0..3
  compute(s, OpKind::Forward, 1, {ag});                               // 5..6
  Timeline t = predict(s, toy_hardware());
  EXPECT_NEAR(t.step_ms, 6, kTol);
  EXPECT_NEAR(t.exposed_comm_ms, 2, kTol);
}

TEST(Cost, DependencyDelaysAnOpPastItsStream) {
  Schedule s = empty_schedule(2, 2, 2);
  int f = compute(s, OpKind::Forward, 7);
  int free_rs =
      collective(s, OpKind::ReduceScatter, StreamId::ReduceScatter, 1);  // no deps: starts at 0
  int rs = collective(s, OpKind::ReduceScatter, StreamId::ReduceScatter, 2,
                      {f});  // waits for f, not just free_rs
  int after =
      compute(s, OpKind::Backward, 1, {rs});  // waits for rs although compute is idle from 7
  Timeline t = predict(s, toy_hardware());
  EXPECT_NEAR(t.ops[free_rs].start_ms, 0, kTol);
  EXPECT_NEAR(t.ops[free_rs].end_ms, 1, kTol);
  EXPECT_NEAR(t.ops[rs].start_ms, 7, kTol);
  EXPECT_NEAR(t.ops[rs].end_ms, 9, kTol);
  EXPECT_NEAR(t.ops[after].start_ms, 9, kTol);
  EXPECT_NEAR(t.step_ms, 10, kTol);
}

TEST(Cost, DependencyOnALaterIssuedOpOfAnotherStreamIsHonoured) {
  Schedule s = empty_schedule(2, 2, 2);
  int f = compute(s, OpKind::Forward, 1);
  s.ops[f].deps = {1};
  collective(s, OpKind::AllGather, StreamId::AllGather, 3);
  Timeline t = predict(s, toy_hardware());
  EXPECT_NEAR(t.ops[f].start_ms, 3, kTol);
}

TEST(Cost, CycleIsAnInternalError) {
  Schedule s = empty_schedule(2, 2, 2);
  compute(s, OpKind::Forward, 1, {1});
  collective(s, OpKind::AllGather, StreamId::AllGather, 1, {0});
  EXPECT_THROW(predict(s, toy_hardware()), std::logic_error);
}

// Figures with latencies, for the ring formula.
Hardware ring_hardware() {
  Hardware h = toy_hardware();
  h.collective_base_latency_s = 5e-6;
  h.intra_node = {100e9, 1e-6};
  h.inter_node = {20e9, 10e-6};
  return h;
}

Op ring_op(OpKind kind, CommGroup group, int64_t n, int64_t payload) {
  Op op;
  op.kind = kind;
  op.stream = kind == OpKind::AllReduce ? StreamId::AllReduce : StreamId::AllGather;
  op.group = group;
  op.group_size = n;
  op.payload_bytes = payload;
  return op;
}

TEST(Cost, RingFormulaInsideANode) {
  Schedule s = empty_schedule(8, 8, 8);
  const Hardware h = ring_hardware();
  // 5 us + 7 hops * 1 us + 8e8 * 7/8 B / 100 GB/s = 7.012 ms
  EXPECT_NEAR(op_seconds(s, ring_op(OpKind::AllGather, CommGroup::Shard, 8, 800'000'000), h),
              7.012e-3, 1e-12);
  EXPECT_NEAR(op_seconds(s, ring_op(OpKind::ReduceScatter, CommGroup::Shard, 8, 800'000'000), h),
              7.012e-3, 1e-12);
  // All-reduce: twice the hops and bytes, one base latency: 5 us + 14 us + 14 ms.
  EXPECT_NEAR(op_seconds(s, ring_op(OpKind::AllReduce, CommGroup::Shard, 8, 800'000'000), h),
              14.019e-3, 1e-12);
}

TEST(Cost, RingFormulaAcrossNodes) {
  // 16 ranks, 8 per node, sharded over all 16: the ring crosses the node
  // boundary once; full nodes get the whole inter-node busbw.
  Schedule s = empty_schedule(16, 16, 8);
  const Hardware h = ring_hardware();
  GroupPlacement g = group_placement(s.units.spec.parallel, CommGroup::Shard, 16);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.ranks_per_node, 8);
  // 5 us + 14 * 1 us + 1 * 10 us + 1.6e9 * 15/16 B / 20 GB/s = 75.029 ms
  EXPECT_NEAR(op_seconds(s, ring_op(OpKind::AllGather, CommGroup::Shard, 16, 1'600'000'000), h),
              75.029e-3, 1e-12);
  // Predicting a one-op schedule gives the same.
  s.ops.push_back(ring_op(OpKind::AllGather, CommGroup::Shard, 16, 1'600'000'000));
  EXPECT_NEAR(predict(s, h).step_ms, 75.029, 1e-9);
}

TEST(Cost, ReplicaGroupOfOneRankPerNodeGetsItsShareOfTheNics) {
  // Hybrid: shard groups are the 8-rank nodes; each replica group holds one
  // rank of each of 2 nodes, and the node's 8 replica groups share its NICs.
  Schedule s = empty_schedule(16, 8, 8);
  s.units.spec.parallel.sharding = Sharding::HybridShard;
  const Hardware h = ring_hardware();
  GroupPlacement g = group_placement(s.units.spec.parallel, CommGroup::Replica, 2);
  EXPECT_EQ(g.nodes, 2);
  EXPECT_EQ(g.ranks_per_node, 1);
  // 5 us + 2 * 10 us + 2 * 1e8 * 1/2 B / (20 GB/s / 8) = 40.025 ms
  EXPECT_NEAR(op_seconds(s, ring_op(OpKind::AllReduce, CommGroup::Replica, 2, 100'000'000), h),
              40.025e-3, 1e-12);
  // The shard group sits inside a node.
  EXPECT_EQ(group_placement(s.units.spec.parallel, CommGroup::Shard, 8).nodes, 1);
}

TEST(Cost, ConcurrentTransfersShareALink) {
  Schedule s = empty_schedule(2, 2, 2);
  int ag = collective(s, OpKind::AllGather, StreamId::AllGather, 4);
  int rs = collective(s, OpKind::ReduceScatter, StreamId::ReduceScatter, 2);
  Timeline shared = predict(s, toy_hardware());
  // Both at half rate until rs finishes at 4 (2 ms of work), then ag alone: 2 ms left at full rate.
  EXPECT_NEAR(shared.ops[rs].end_ms, 4, kTol);
  EXPECT_NEAR(shared.ops[ag].end_ms, 6, kTol);
  Timeline alone = predict(s, toy_hardware(), {.share_links = false});
  EXPECT_NEAR(alone.ops[rs].end_ms, 2, kTol);
  EXPECT_NEAR(alone.ops[ag].end_ms, 4, kTol);
}

TEST(Cost, MfuOfPureComputeIsTheEfficiency) {
  Schedule s = empty_schedule(4, 4, 4);
  const Spec& spec = s.units.spec;
  s.micro_batch = 2;
  const double tokens = 2.0 * spec.model.context;
  const double model_flops = model_flops_per_token(spec.model) * tokens;
  Hardware h = toy_hardware();
  h.gemm_half_flops = 1e6;
  // Forward is a third of the model FLOPs and backward two thirds; per GEMM
  // both are forward/6, so both run at the same efficiency.
  int f = add(s, OpKind::Forward, StreamId::Compute);
  s.ops[f].flops = model_flops / 3;
  int b = add(s, OpKind::Backward, StreamId::Compute);
  s.ops[b].flops = 2 * model_flops / 3;
  const double eff = h.gemm_efficiency(model_flops / 3 / 6);
  ASSERT_GT(eff, 0.1);
  ASSERT_LT(eff, 0.5);
  Timeline t = predict(s, h);
  EXPECT_NEAR(t.mfu, eff, 1e-12);
  EXPECT_NEAR(t.hfu, eff, 1e-12);
  EXPECT_NEAR(t.model_tflops, eff * 1.0, 1e-12);  // peak 1 TFLOP/s
  EXPECT_NEAR(t.tokens_per_step, 4 * tokens, 1e-9);
  EXPECT_NEAR(t.tokens_per_s, 4 * tokens / (t.step_ms / 1e3), 1e-6);
  EXPECT_NEAR(t.exposed_comm_ms, 0, kTol);

  // Recompute is real work but not model work: hardware FLOPs grow by a
  // third, MFU drops to 3/4 of the efficiency.
  int r = add(s, OpKind::Recompute, StreamId::Compute);
  s.ops[r].flops = model_flops / 3;
  Timeline tr = predict(s, h);
  EXPECT_NEAR(tr.mfu, 0.75 * eff, 1e-12);
  EXPECT_NEAR(tr.hfu, eff, 1e-12);
  EXPECT_NEAR(tr.hardware_flops_per_rank, 4 * model_flops / 3, 1e-3);
}

TEST(Cost, LaunchOverheadAndMemoryBoundOps) {
  Schedule s = empty_schedule(2, 2, 2);
  Hardware h = toy_hardware();
  h.launch_overhead_s = 1e-3;
  int opt = add(s, OpKind::OptimizerStep, StreamId::Compute);
  s.ops[opt].memory_bytes = 20'000'000;  // 2 ms at 10 GB/s
  int host = add(s, OpKind::OptimizerStep, StreamId::Host);
  s.ops[host].memory_bytes = 3'000'000;  // 3 ms at 1 GB/s of host memory
  int copy = add(s, OpKind::CopyH2D, StreamId::Copy);
  s.ops[copy].payload_bytes = 5'000'000;  // 5 ms at 1 GB/s
  Timeline t = predict(s, h);
  EXPECT_NEAR(t.ops[opt].ms(), 3, kTol);
  EXPECT_NEAR(t.ops[host].ms(), 4, kTol);
  EXPECT_NEAR(t.ops[copy].ms(), 6, kTol);
  EXPECT_EQ(t.copy_bytes, 5'000'000);
}

TEST(Cost, MissingFigureIsReported) {
  Schedule s = empty_schedule(2, 2, 2);
  collective(s, OpKind::AllGather, StreamId::AllGather, 1);
  Hardware h = toy_hardware();
  h.intra_node.busbw_bytes_per_s = 0;
  EXPECT_THROW(predict(s, h), std::invalid_argument);
}

TEST(Cost, CommBytesAreTheRingBytes) {
  Schedule s = empty_schedule(4, 4, 4);
  int ag = collective(s, OpKind::AllGather, StreamId::AllGather, 3);
  s.ops[ag].payload_bytes = 4000;
  int ar = add(s, OpKind::AllReduce, StreamId::AllReduce);
  s.ops[ar].group = CommGroup::Shard;
  s.ops[ar].group_size = 4;
  s.ops[ar].payload_bytes = 400;
  EXPECT_EQ(predict(s, toy_hardware()).comm_bytes, 3000 + 600);
}

TEST(Cost, TraceIsValidJsonWithOneTrackPerStream) {
  Schedule s = empty_schedule(2, 2, 2);
  int ag = collective(s, OpKind::AllGather, StreamId::AllGather, 4);
  int f = compute(s, OpKind::Forward, 10, {ag});
  collective(s, OpKind::ReduceScatter, StreamId::ReduceScatter, 4, {f});
  add(s, OpKind::Free, StreamId::Compute, {2});
  s.ops[f].unit = 1;
  s.ops[f].micro_batch = 0;
  Timeline t = predict(s, toy_hardware());
  nlohmann::json j = nlohmann::json::parse(trace_json(s, t));
  EXPECT_EQ(j["displayTimeUnit"], "ms");
  std::set<int> named, used;
  int complete = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      EXPECT_TRUE(named.insert(e["tid"].get<int>()).second) << "two names for one track";
      EXPECT_EQ(e["args"]["name"], std::string(kStreamNames[e["tid"].get<int>()]));
    }
    if (e["ph"] != "X") continue;
    ++complete;
    EXPECT_EQ(e["pid"], 0);
    used.insert(e["tid"].get<int>());
    ASSERT_TRUE(e["ts"].is_number());
    ASSERT_TRUE(e["dur"].is_number());
    EXPECT_TRUE(std::isfinite(e["ts"].get<double>()));
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_TRUE(e["args"].contains("deps"));
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(named, used);
  EXPECT_EQ(used.size(), 3u);  // compute, allgather, reducescatter
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X" || e["args"]["op"] != f) continue;
    EXPECT_EQ(e["name"], "F u1 mb0");
    EXPECT_NEAR(e["ts"].get<double>(), 4000, 1e-6);  // microseconds
    EXPECT_NEAR(e["dur"].get<double>(), 10000, 1e-6);
    EXPECT_EQ(e["args"]["unit"], 1);
    EXPECT_EQ(e["args"]["deps"], nlohmann::json::array({ag}));
  }
}

TEST(Hardware, LookupByName) {
  for (std::string_view name :
       {"h100-sxm", "h200", "a100-80g", "a100-40g", "a100-80g-roce", "cpu"}) {
    std::optional<Hardware> h = find_hardware(name);
    ASSERT_TRUE(h) << name;
    EXPECT_EQ(h->name, name);
    EXPECT_GT(h->peak_flops(DType::BF16), 0);
    EXPECT_GT(h->peak_flops(DType::FP32), 0);
    EXPECT_GT(h->memory_bytes, 0);
    EXPECT_GT(h->gemm_max_efficiency, 0);
    EXPECT_LE(h->gemm_max_efficiency, 1);
    EXPECT_GT(h->intra_node.busbw_bytes_per_s, h->inter_node.busbw_bytes_per_s);
    EXPECT_FALSE(print_hardware(*h).empty());
  }
  EXPECT_FALSE(find_hardware("a100"));
  const Hardware a100 = *find_hardware("a100-80g");
  EXPECT_EQ(a100.peak_bf16_flops, 312e12);
  EXPECT_EQ(a100.peak_fp32_flops, 19.5e12);
  const Hardware h100 = *find_hardware("h100-sxm"), h200 = *find_hardware("h200");
  EXPECT_EQ(h100.peak_bf16_flops, h200.peak_bf16_flops);
  EXPECT_GT(h200.memory_bytes, h100.memory_bytes);
  EXPECT_GT(h200.memory_bytes_per_s, h100.memory_bytes_per_s);
}

TEST(Hardware, UnknownNameSuggestsAndListsChoices) {
  EXPECT_EQ(unknown_hardware_error("h100-smx"),
            "unknown hardware 'h100-smx'; did you mean 'h100-sxm'? known: 'a100-40g', 'a100-80g', "
            "'a100-80g-roce', 'cpu', 'h100-sxm' and 'h200'");
  std::string prefix = unknown_hardware_error("a100");
  EXPECT_NE(prefix.find("did you mean 'a100-40g', 'a100-80g' or 'a100-80g-roce'?"),
            std::string::npos)
      << prefix;
  std::string none = unknown_hardware_error("tpu-v5");
  EXPECT_EQ(none.find("did you mean"), std::string::npos) << none;
  EXPECT_NE(none.find("known: "), std::string::npos) << none;
}

// The FSDP paper's cluster (2 Tb/s RoCE per node: 80% of 250 GB/s) and the
// 1T blog's (p4d: 4 x 100 Gb/s EFA: 80% of 50 GB/s), with their sources in
// what `fsdpgen plan` prints; the paper's GPT-175B plans on both.
TEST(Hardware, PaperClustersCarryTheirSourcedNetworks) {
  const Hardware roce = *find_hardware("a100-80g-roce"), p4d = *find_hardware("a100-40g");
  EXPECT_EQ(roce.inter_node.busbw_bytes_per_s, 200e9);
  EXPECT_EQ(p4d.inter_node.busbw_bytes_per_s, 40e9);
  EXPECT_EQ(roce.peak_bf16_flops, find_hardware("a100-80g")->peak_bf16_flops);
  EXPECT_NE(print_hardware(roce).find("2 Tb/s RoCE"), std::string::npos) << print_hardware(roce);
  EXPECT_NE(print_hardware(p4d).find("1T blog"), std::string::npos) << print_hardware(p4d);
  for (const Hardware* h : {&roce, &p4d})
    for (const std::string* source :
         {&h->sources.peak, &h->sources.efficiency, &h->sources.memory, &h->sources.intra_node,
          &h->sources.inter_node, &h->sources.fixed, &h->sources.host})
      EXPECT_FALSE(source->empty()) << h->name;
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/gpt-175b.fsdp",
                                    {.world = 128, .micro_batch = 1});
  ASSERT_TRUE(r.spec) << r.diagnostics;
  const Plan plan = make_plan(*r.spec, roce);
  EXPECT_TRUE(plan.fits);
  EXPECT_GT(plan.timeline->model_tflops, 100);
}

TEST(Hardware, EfficiencyCurveSaturates) {
  const Hardware h = *find_hardware("a100-80g");
  EXPECT_NEAR(h.gemm_efficiency(h.gemm_half_flops), h.gemm_max_efficiency / 2, 1e-12);
  EXPECT_LT(h.gemm_efficiency(1e6), h.gemm_efficiency(1e9));
  EXPECT_NEAR(h.gemm_efficiency(1e15), h.gemm_max_efficiency, 1e-5);
  EXPECT_EQ(h.gemm_efficiency(0), 0);
}

// A planned schedule: every op respects its stream order and its deps.
TEST(Cost, PlannedScheduleIsConsistent) {
  const std::string text = R"(
model t { vocab = 256 context = 64 width = 64 heads = 4 layers = 4 }
parallel {
  world = 4
  ranks_per_node = 2
  sharding = full_shard
  precision { param = bf16 reduce = fp32 master = fp32 }
  recompute = block
  accumulate { micro_batches = 2 }
}
train { micro_batch = 2 }
)";
  FrontendResult r = load_spec_text("cost.fsdp", text);
  ASSERT_TRUE(r.spec) << r.diagnostics;
  Schedule s = build_schedule(lower(*r.spec));
  for (std::string_view name : hardware_names()) {
    const Hardware h = *find_hardware(name);
    Timeline t = predict(s, h);
    ASSERT_EQ(t.ops.size(), s.ops.size());
    std::vector<double> stream_end(kStreamNames.size(), 0);
    for (const Op& op : s.ops) {
      const OpTime& ot = t.ops[op.id];
      EXPECT_GE(ot.start_ms, stream_end[static_cast<size_t>(op.stream)] - 1e-9) << op.label();
      stream_end[static_cast<size_t>(op.stream)] = ot.end_ms;
      for (int d : op.deps)
        EXPECT_GE(ot.start_ms, t.ops[d].end_ms - 1e-9) << op.label() << " on " << d;
      EXPECT_LE(ot.end_ms, t.step_ms + 1e-9);
    }
    EXPECT_GT(t.step_ms, 0);
    EXPECT_GT(t.mfu, 0);
    EXPECT_LT(t.mfu, h.gemm_max_efficiency);
    EXPECT_GT(t.hfu, t.mfu);  // recompute
    EXPECT_LE(t.exposed_comm_ms, t.comm_ms + 1e-9);
    EXPECT_LE(t.compute_ms, t.step_ms + 1e-9);
    EXPECT_EQ(t.comm_bytes, s.sent_bytes(OpKind::AllGather) + s.sent_bytes(OpKind::ReduceScatter) +
                                s.sent_bytes(OpKind::AllReduce));
    EXPECT_NE(print_timeline(s, t).find("MFU"), std::string::npos);
    EXPECT_NO_THROW(nlohmann::json::parse(trace_json(s, t)));
  }
}

}  // namespace
}  // namespace fsdpgen
