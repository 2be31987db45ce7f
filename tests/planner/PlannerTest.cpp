// Planner figures against formulas: parameter counts, flat-parameter padding
// and alignment, communication bytes per step (ZeRO paper: 3*Psi*b*(W-1)/W for
// full_shard, 2*Psi*b*(W-1)/W for shard_grad_op and no_shard), model-state
// bytes (16*Psi/W for mixed-precision AdamW under full_shard), and the effect
// of each memory knob on the plan.
#include <algorithm>

#include <gtest/gtest.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Alternatives.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/Planner.h"
#include "codegen/planner/Verify.h"
#include "dsl/Units.h"
#include "tests/planner/PlanTestUtil.h"

namespace fsdpgen::test {
namespace {

std::string model(int world, const std::string& parallel, const std::string& units = "each block",
                  const std::string& extra = "") {
  return fmt::format(
      "model m {{ vocab = 512 context = 64 width = 128 heads = 4 layers = 6 {} }}\n"
      "units {{ {} }}\nparallel {{ world = {} {} }}\ntrain {{ micro_batch = 2 }}\n",
      extra, units, world, parallel);
}

TEST(Lower, Gpt2SmallHas124MParametersAndAlignedShards) {
  Planned p = plan_text(
      "model g { vocab = 50257 context = 1024 width = 768 heads = 12 layers = 12 }\n"
      "parallel { world = 8 precision { param = bf16 } }");
  EXPECT_EQ(p.units.total_params, 124439808);
  for (const FlatUnit& u : p.units.units) {
    EXPECT_EQ(u.padded_elems, u.shard_elems * 8);
    EXPECT_EQ(u.shard_elems * 2 % 256, 0) << u.name;  // 256-byte aligned bf16 shards
    EXPECT_GE(u.padded_elems, u.param_elems);
    // Shard padding and alignment gaps, besides the vocab padding (47 zero rows of wte).
    EXPECT_LT(u.padded_elems - u.param_elems - u.vocab_padding_elems, 8 * 128 + 16 * 16) << u.name;
    for (const FlatTensor& t : u.tensors)
      EXPECT_EQ(t.offset_elems % kTensorAlignElems, 0);
  }
  // The tied head owns no tensor: the root holds wte, wpe and ln_f only.
  ASSERT_EQ(p.units.units[0].tensors.size(), 4u);
  EXPECT_EQ(p.units.units[0].tensors[0].name, "transformer.wte.weight");
}

// Vocab padding (pad_vocab_to, default 128): wte keeps its true shape and
// parameter count and occupies 50304 rows of the flat parameter (llm.c's
// 50257 -> 50304), the logits buffer has 50304 columns, the time model counts
// the padded head GEMM, MFU's model FLOPs the true one; pad_vocab_to = 1 lays
// out what the unpadded planner did.
TEST(Lower, VocabPaddedTo128KeepsTrueShapesAndCounts) {
  const std::string gpt2 =
      "model g {{ vocab = 50257 context = 1024 width = 768 heads = 12 layers = 12 {} }}\n"
      "parallel {{ world = 8 precision {{ param = bf16 }} }}\ntrain {{ micro_batch = 2 }}";
  const Planned padded = plan_text(fmt::format(fmt::runtime(gpt2), ""));
  const Planned plain = plan_text(fmt::format(fmt::runtime(gpt2), "pad_vocab_to = 1"));
  const int64_t C = 768, V = 50257, Vp = 50304, tokens = 2 * 1024;
  EXPECT_EQ(padded.spec.model.padded_vocab(), Vp);
  EXPECT_EQ(plain.spec.model.padded_vocab(), V);
  EXPECT_EQ(padded.units.total_params, 124439808);
  EXPECT_EQ(plain.units.total_params, 124439808);
  EXPECT_EQ(padded.units.total_vocab_padding_elems, (Vp - V) * C);
  EXPECT_EQ(plain.units.total_vocab_padding_elems, 0);
  for (const auto& [p, rows] : {std::pair{&padded, Vp}, std::pair{&plain, V}}) {
    const FlatTensor& wte = p->units.units[0].tensors[0];
    const FlatTensor& wpe = p->units.units[0].tensors[1];
    EXPECT_EQ(wte.name, "transformer.wte.weight");
    EXPECT_EQ(wte.shape, (std::vector<int64_t>{V, C}));
    EXPECT_EQ(wte.elems, V * C);
    EXPECT_EQ(wte.stored_elems, rows * C);
    EXPECT_EQ(wpe.offset_elems, (rows * C + 15) / 16 * 16);
    EXPECT_EQ(p->units.units[0].vocab_padding_elems, (rows - V) * C);
    int64_t logits = 0;
    for (const Buffer& b : p->schedule.buffers)
      if (b.kind == BufferKind::Logits) logits = b.bytes;
    EXPECT_EQ(logits, (rows * 2 + 4) * tokens) << "bf16 logits and an fp32 loss per token";
  }
  EXPECT_EQ(model_flops_per_token(padded.spec.model), model_flops_per_token(plain.spec.model));
  const Segment& head = padded.units.segments.back();
  EXPECT_EQ(segment_forward_flops(padded.spec.model, head, tokens) -
                segment_forward_flops(plain.spec.model, head, tokens),
            2.0 * C * (Vp - V) * tokens);
  EXPECT_NE(print_units(padded.units)
                .find(fmt::format(", {} of them vocab padding: vocab 50257 stored as 50304 rows",
                                  (Vp - V) * C)),
            std::string::npos)
      << print_units(padded.units);
  EXPECT_EQ(print_units(plain.units).find("vocab padding"), std::string::npos);
}

// Untied: lm_head.weight is padded as well; a vocabulary already a multiple
// of the padding is not padded.
TEST(Lower, VocabPaddingOfUntiedHeadAndOfAMultiple) {
  const Planned untied = plan_text(
      "model g { vocab = 100 context = 16 width = 32 heads = 2 layers = 2 tie_embeddings = false "
      "}\nparallel { world = 2 }\ntrain { micro_batch = 2 }");
  EXPECT_EQ(untied.units.total_vocab_padding_elems, 2 * 28 * 32);
  const FlatUnit& root = untied.units.units[0];
  EXPECT_EQ(root.tensors.back().name, "lm_head.weight");
  EXPECT_EQ(root.tensors.back().stored_elems, 128 * 32);
  EXPECT_EQ(root.tensors.back().shape, (std::vector<int64_t>{100, 32}));
  const Planned multiple = plan_text(model(2, ""));  // vocab 512
  EXPECT_EQ(multiple.units.total_vocab_padding_elems, 0);
}

TEST(Lower, SegmentsFollowForwardOrder) {
  Planned p = plan_text(model(2, "", "unit mid [block 2..3] each block"));
  std::vector<int> units;
  for (const Segment& s : p.units.segments)
    units.push_back(s.unit);
  EXPECT_EQ(units, (std::vector<int>{0, 1, 2, 3, 4, 5, 0}));
  EXPECT_EQ(p.units.units[3].name, "mid");
  EXPECT_TRUE(p.units.segments.back().has_loss);
}

int64_t padded_bytes(const Units& u, int64_t bytes, bool skip_root = false) {
  int64_t n = 0;
  for (const FlatUnit& f : u.units)
    if (!(skip_root && f.index == 0)) n += f.padded_elems * bytes;
  return n;
}

// Bytes one rank sends per step over every collective: the all-gathers of
// parameters, the reduce-scatters and all-reduces of gradients, and the
// all-reduce of the gradient norm (norm_bytes).
int64_t sent(const Schedule& s) {
  return s.sent_bytes(OpKind::AllGather) + s.sent_bytes(OpKind::ReduceScatter) +
         s.sent_bytes(OpKind::AllReduce);
}

// Gradient-norm all-reduce: one fp32 partial per rank of the shard group, a
// ring all-reduce of 4 * S bytes (2 * (S - 1) / S of it sent); none when
// every rank holds whole gradients (S = 1).
int64_t norm_bytes(const Schedule& s) {
  const int64_t S = s.units.spec.parallel.shard_group;
  return S > 1 ? 2 * 4 * (S - 1) : 0;
}

TEST(CommBytes, FullShardIsThreePsi) {
  for (int W : {2, 4, 8, 64}) {
    // No root: every unit is gathered in forward and again in backward.
    Planned p = plan_text(model(W, "precision { param = bf16 reduce = bf16 }",
                                "unit first [embed] unit last [final_norm, head] each block",
                                "tie_embeddings = false"));
    ASSERT_EQ(p.units.units[0].param_elems, 0);
    // full_shard all-reduces nothing but the gradient norm.
    EXPECT_EQ(p.schedule.sent_bytes(OpKind::AllReduce), norm_bytes(p.schedule)) << "world " << W;
    const int64_t psi_b = padded_bytes(p.units, 2);
    EXPECT_EQ(sent(p.schedule) - norm_bytes(p.schedule), 3 * psi_b / W * (W - 1)) << "world " << W;
    // With a root unit, the root is gathered once and stays through backward.
    Planned q = plan_text(model(W, "precision { param = bf16 reduce = bf16 }"));
    const int64_t root = q.units.units[0].padded_elems * 2;
    EXPECT_EQ(sent(q.schedule) - norm_bytes(q.schedule),
              (3 * padded_bytes(q.units, 2) - root) / W * (W - 1));
  }
}

TEST(CommBytes, ShardGradOpAndNoShardAreTwoPsi) {
  for (int W : {2, 4, 8}) {
    Planned z2 =
        plan_text(model(W, "sharding = shard_grad_op precision { param = bf16 reduce = bf16 }"));
    EXPECT_EQ(sent(z2.schedule) - norm_bytes(z2.schedule),
              2 * padded_bytes(z2.units, 2) / W * (W - 1));
    Planned ddp =
        plan_text(model(W, "sharding = no_shard precision { param = bf16 reduce = bf16 }"));
    EXPECT_EQ(ddp.schedule.sent_bytes(OpKind::AllGather), 0);
    EXPECT_EQ(sent(ddp.schedule), 2 * padded_bytes(ddp.units, 2) / W * (W - 1));
  }
}

TEST(CommBytes, HybridAllReducesTheShardOncePerStep) {
  Planned p =
      plan_text(model(8,
                      "sharding = hybrid_shard shard_group = 4 ranks_per_node = 4 "
                      "precision { param = bf16 reduce = bf16 } accumulate { micro_batches = 3 }"));
  const int64_t psi_b = padded_bytes(p.units, 2);
  int64_t ar = 0;
  for (const Op& op : p.schedule.ops)
    if (op.kind == OpKind::AllReduce && op.unit >= 0) ar += op.sent_bytes();
  // Shards of size Psi/4 all-reduced over 2 replicas: 2 * (Psi/4) * 1/2 each, once.
  EXPECT_EQ(ar, psi_b / 4);
  // The other all-reduce is the gradient norm's, over the shard group of 4.
  EXPECT_EQ(p.schedule.sent_bytes(OpKind::AllReduce), ar + norm_bytes(p.schedule));
  EXPECT_EQ(p.schedule.sent_bytes(OpKind::ReduceScatter), 3 * psi_b / 4 * 3);
}

TEST(ModelState, MixedPrecisionAdamWIsSixteenPsiOverW) {
  for (int W : {1, 2, 8, 64}) {
    Planned p = plan_text(model(W, "precision { param = bf16 reduce = bf16 master = fp32 }"));
    int64_t state = 0;
    for (const Buffer& b : p.schedule.buffers)
      if (b.kind == BufferKind::ParamShard || b.kind == BufferKind::MasterWeights ||
          b.kind == BufferKind::OptimizerState || b.kind == BufferKind::GradShard)
        state += b.bytes;
    int64_t padded = padded_bytes(p.units, 1);
    // 2 (bf16 param) + 4 (fp32 master) + 8 (m, v) + 2 (bf16 grad) per element;
    // world 1 reduces nothing: its fp32 gradients are the unsharded buffer.
    EXPECT_EQ(state, (W == 1 ? 14 : 16) * padded / W) << "world " << W;
  }
}

TEST(Memory, ArenaIsCloseToThePeakAndReuseSaves) {
  // First fit by size is not always optimal: allow 5% fragmentation.
  Planned p = plan_text(model(4, ""));
  EXPECT_GE(p.memory.device_arena_bytes, p.memory.live_peak_bytes);
  EXPECT_LE(p.memory.device_arena_bytes, p.memory.live_peak_bytes * 105 / 100);
  EXPECT_LT(p.memory.device_arena_bytes, p.memory.naive_bytes);
  MemoryPlan off = plan_memory(p.schedule, {256, false});
  EXPECT_GE(off.device_arena_bytes, p.memory.naive_bytes);
}

// build --check: every buffer between two red zones that no buffer live at
// the same time overlaps, its offset its data's, aligned as before.
TEST(Memory, RedZonesAreEachBuffersOwnWhileItLives) {
  Planned p = plan_text(model(4, "offload = cpu"));
  constexpr int64_t kRed = 256;
  for (bool reuse : {true, false}) {
    const MemoryPlan m = plan_memory(p.schedule, {256, reuse, kRed});
    EXPECT_EQ(m.red_zone_bytes, kRed);
    EXPECT_GT(m.device_arena_bytes, p.memory.device_arena_bytes);
    const std::vector<Buffer>& bufs = p.schedule.buffers;
    for (const Buffer& a : bufs) {
      const Placement& pa = m.placements[static_cast<size_t>(a.id)];
      EXPECT_EQ(pa.offset % 256, 0) << a.name;
      EXPECT_GE(pa.offset, kRed) << a.name;
      const int64_t arena = a.space == MemSpace::Device ? m.device_arena_bytes : m.host_arena_bytes;
      EXPECT_LE(pa.offset + a.bytes + kRed, arena) << a.name;
      for (const Buffer& b : bufs) {
        if (b.id <= a.id || b.space != a.space) continue;
        const Placement& pb = m.placements[static_cast<size_t>(b.id)];
        if (pa.last_op < pb.first_op || pb.last_op < pa.first_op) continue;  // never both live
        const bool apart = pa.offset + a.bytes + kRed <= pb.offset - kRed ||
                           pb.offset + b.bytes + kRed <= pa.offset - kRed;
        EXPECT_TRUE(apart) << a.name << " and " << b.name << " share a red zone";
      }
    }
  }
}

int64_t peak_of(const Planned& p, BufferKind k) {
  return p.memory.peak_by_kind[static_cast<int>(k)];
}

TEST(Memory, KnobsMoveThePlanTheRightWay) {
  Planned base = plan_text(model(4, ""));
  Planned recompute = plan_text(model(4, "recompute = block"));
  EXPECT_LT(recompute.memory.live_peak_bytes, base.memory.live_peak_bytes);
  EXPECT_GT(peak_of(recompute, BufferKind::RecomputeScratch), 0);
  Planned zero2 = plan_text(model(4, "sharding = shard_grad_op"));
  EXPECT_GT(peak_of(zero2, BufferKind::UnshardedParams),
            peak_of(base, BufferKind::UnshardedParams));
  // One more gathered block in flight at the peak: one block unit's unsharded
  // fp32 parameters more.
  Planned wider = plan_text(model(4, "prefetch { max_inflight = 3 }"));
  EXPECT_GT(peak_of(wider, BufferKind::UnshardedParams),
            peak_of(base, BufferKind::UnshardedParams));
  EXPECT_EQ(
      peak_of(wider, BufferKind::UnshardedParams) - peak_of(base, BufferKind::UnshardedParams),
      base.units.units[1].padded_elems * 4);
  Planned offload = plan_text(model(4, "offload = cpu"));
  EXPECT_EQ(peak_of(offload, BufferKind::OptimizerState), 0);
  EXPECT_GT(offload.memory.host_arena_bytes, 0);
  Planned more = plan_text(model(16, ""));
  EXPECT_LT(peak_of(more, BufferKind::OptimizerState), peak_of(base, BufferKind::OptimizerState));
  Planned flash = plan_text(model(4, ""), {.flash_attention = true});
  EXPECT_LT(flash.memory.live_peak_bytes, base.memory.live_peak_bytes);
}

int64_t workspace_bytes(const Schedule& s) {
  for (const Buffer& b : s.buffers)
    if (b.kind == BufferKind::Workspace) return b.bytes;
  return -1;
}

// The workspace buffer on a GPU: cuBLASLt's 32 MiB, or with 16-bit flash
// attention (which may run on cuDNN) the larger of that and cuDNN's
// attention workspace: 4 bytes per token for each of C (the backward's fp32
// dQ accumulator) and H (its fp32 softmax sums), plus the engines' slack.
// The figures are written out from that definition (GPT-2 124M at B = 16,
// T = 1024: 4 * 16384 * (768 + 12) + 1 MiB), not computed by the planner's
// function, and the plan grows by exactly the difference.
TEST(Memory, GpuWorkspaceHoldsCudnnAttentionFor16BitFlash) {
  const Hardware hw = *find_hardware("h100-sxm");
  auto gpt2 = [](const std::string& param, int heads, int micro_batch) {
    FrontendResult r = load_spec_text(
        "g.fsdp",
        fmt::format("model g {{ vocab = 50257 context = 1024 width = 768 heads = {} layers = 2 }}\n"
                    "parallel {{ world = 1 precision {{ param = {} }} }}\n"
                    "train {{ micro_batch = {} }}\n",
                    heads, param, micro_batch));
    EXPECT_TRUE(r.spec.has_value()) << r.diagnostics;
    return *r.spec;
  };
  constexpr int64_t kLt = int64_t{32} << 20;
  const Plan fp32 = make_plan(gpt2("fp32", 12, 16), hw);
  EXPECT_EQ(workspace_bytes(*fp32.schedule), kLt);
  for (const char* half : {"bf16", "fp16"}) {
    SCOPED_TRACE(half);
    const Plan big = make_plan(gpt2(half, 12, 16), hw);
    ASSERT_TRUE(big.schedule->options.flash_attention);
    EXPECT_TRUE(big.schedule->options.cudnn_attention_workspace);
    const int64_t cudnn = 4 * 16 * 1024 * (768 + 12) + (int64_t{1} << 20);
    EXPECT_EQ(workspace_bytes(*big.schedule), cudnn);
    EXPECT_GT(cudnn, kLt);
    // A micro-batch whose attention needs less than cuBLASLt: cuBLASLt's size.
    EXPECT_EQ(workspace_bytes(*make_plan(gpt2(half, 12, 2), hw).schedule), kLt);
    // Head size 768 / 64 = 12 is not a multiple of 8: cuDNN does not take it.
    const Plan odd = make_plan(gpt2(half, 64, 16), hw);
    EXPECT_FALSE(odd.schedule->options.cudnn_attention_workspace);
    EXPECT_EQ(workspace_bytes(*odd.schedule), kLt);
  }
  // The same bf16 plan with and without the reservation differ by exactly
  // the workspace's growth in the device arena's peak.
  ScheduleOptions o = schedule_options_for(hw, gpt2("bf16", 12, 16));
  const Units u = lower(gpt2("bf16", 12, 16));
  const MemoryPlan with = plan_memory(build_schedule(u, o));
  o.cudnn_attention_workspace = false;
  const MemoryPlan without = plan_memory(build_schedule(u, o));
  EXPECT_EQ(with.live_peak_bytes - without.live_peak_bytes,
            4 * 16 * 1024 * (768 + 12) + (int64_t{1} << 20) - kLt);
  // CPUs plan no flash attention and keep their workspace.
  const Plan cpu = make_plan(gpt2("bf16", 12, 16), *find_hardware("cpu"));
  EXPECT_FALSE(cpu.schedule->options.cudnn_attention_workspace);
  EXPECT_EQ(workspace_bytes(*cpu.schedule), kCpuGemmWorkspaceBytes);
}

TEST(Schedule, ForwardPrefetchIssuesTheNextGatherBeforeTheCurrentForward) {
  Planned p = plan_text(model(2, "prefetch { forward = true backward = none }"));
  const auto& ops = p.schedule.ops;
  for (const Op& f : ops) {
    if (f.kind != OpKind::Forward || f.unit < 1 || f.unit >= 6) continue;
    bool next_issued = false;
    for (const Op& ag : ops)
      if (ag.kind == OpKind::AllGather && ag.unit == f.unit + 1 && ag.id < f.id) next_issued = true;
    EXPECT_TRUE(next_issued) << "AG u" << f.unit + 1 << " should precede F u" << f.unit;
  }
}

TEST(Schedule, BackwardPrefetchPrePostNone) {
  auto position = [](const Planned& p, OpKind kind, int unit, bool backward_phase) {
    bool in_bwd = false;
    for (const Op& op : p.schedule.ops) {
      if (op.kind == OpKind::Backward) in_bwd = true;
      if (op.kind == kind && op.unit == unit && in_bwd == backward_phase) return op.id;
    }
    return -1;
  };
  for (const char* mode : {"pre", "post", "none"}) {
    Planned p =
        plan_text(model(2, fmt::format("prefetch {{ forward = false backward = {} }}", mode)));
    int ag4 = position(p, OpKind::AllGather, 4, true), b5 = position(p, OpKind::Backward, 5, true);
    int rs5 = position(p, OpKind::ReduceScatter, 5, true),
        b4 = position(p, OpKind::Backward, 4, true);
    ASSERT_GE(ag4, 0);
    if (std::string(mode) == "pre") {
      EXPECT_LT(ag4, b5);
    }
    if (std::string(mode) == "post") {
      EXPECT_TRUE(b5 < ag4 && ag4 < rs5) << ag4 << " " << b5 << " " << rs5;
    }
    if (std::string(mode) == "none") {
      EXPECT_TRUE(rs5 < ag4 && ag4 < b4) << ag4 << " " << rs5 << " " << b4;
    }
  }
}

TEST(Schedule, RecomputeRunsTheForwardAgainBeforeEachBlockBackward) {
  Planned p = plan_text(model(2, "recompute = block"));
  int recomputes = 0;
  for (const Op& op : p.schedule.ops) {
    if (op.kind != OpKind::Recompute) continue;
    ++recomputes;
    const Op& next = p.schedule.ops[op.id + 1];
    EXPECT_EQ(next.kind, OpKind::Backward);
    EXPECT_EQ(next.segment, op.segment);
  }
  EXPECT_EQ(recomputes, 6);
}

TEST(Schedule, AccumulateLastReducesOnlyAfterTheLastMicroBatch) {
  Planned p = plan_text(model(2, "accumulate { micro_batches = 4 reduce = last }"));
  for (const Op& op : p.schedule.ops)
    if (op.kind == OpKind::ReduceScatter) {
      EXPECT_EQ(op.micro_batch, 3);
    }
  Planned every = plan_text(model(2, "accumulate { micro_batches = 4 reduce = every }"));
  EXPECT_EQ(every.schedule.sent_bytes(OpKind::ReduceScatter),
            4 * p.schedule.sent_bytes(OpKind::ReduceScatter));
}

int count(const Schedule& s, OpKind kind) {
  int n = 0;
  for (const Op& op : s.ops)
    n += op.kind == kind;
  return n;
}

// GPT-1T (128 blocks, width 25600) as the 1T blog trains it: fully sharded
// over 512 ranks in fp16, each linear layer its own unit, every block
// recomputed, parameters and checkpointed activations offloaded: a plan the
// verifier accepts, with the collectives, traffic, model state and gathered
// parameters that implies, fitting an A100-40GB and its share of a p4d's RAM.
TEST(Schedule, Gpt1TAtWorld512Plans) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/gpt-1t.fsdp");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  const Spec& spec = *r.spec;
  Units u = lower(spec);
  EXPECT_GT(u.total_params, 1000000000000);
  const Hardware hw = *find_hardware("a100-40g");
  const Plan p = make_plan(spec, hw);
  const Schedule& s = *p.schedule;
  const MemoryPlan& m = *p.memory;
  EXPECT_EQ(verify_plan(s, m), std::vector<std::string>{});
  EXPECT_TRUE(plan_fits(m, hw));

  const int64_t W = 512, blocks = 128, per_block = 4;
  ASSERT_EQ(std::ssize(u.units), 1 + per_block * blocks);
  // Each unit is gathered for its forward, again for its block's recompute
  // (but a block's last linear, whose forward only writes the block's
  // output) and again for its backward, each time from its host shard; one
  // reduce-scatter per unit; the only all-reduce is the gradient norm's.
  const int64_t gathers = 1 + blocks * (3 * per_block - 1);
  EXPECT_EQ(count(s, OpKind::AllGather), gathers);
  EXPECT_EQ(count(s, OpKind::ReduceScatter), 1 + per_block * blocks);
  EXPECT_EQ(count(s, OpKind::AllReduce), 1);
  EXPECT_EQ(count(s, OpKind::Recompute), blocks * (per_block - 1));
  // Checkpointed inputs go to the host after each block's forward and come back for its recompute.
  int to_host = 0, back = 0;
  for (const Op& op : s.ops) {
    if (op.segment < 0) continue;
    to_host += op.kind == OpKind::CopyD2H;
    back += op.kind == OpKind::CopyH2D;
  }
  EXPECT_EQ(to_host, blocks);
  EXPECT_EQ(back, blocks);

  // The largest gathered piece is an MLP matrix (4 H^2 fp16); at most
  // max_inflight of them beside the root; never a whole block (12 H^2).
  const double H = static_cast<double>(spec.model.width);
  auto at_peak = [&](BufferKind k) { return m.peak_by_kind[static_cast<size_t>(k)]; };
  const int64_t gathered = at_peak(BufferKind::UnshardedParams);
  const int64_t root_bytes = u.units[0].padded_elems * 2;
  EXPECT_GE(gathered, root_bytes + static_cast<int64_t>(4 * H * H * 2));
  EXPECT_LE(gathered, root_bytes + static_cast<int64_t>(spec.parallel.prefetch.max_inflight * 4.01 *
                                                        H * H * 2));
  EXPECT_LT(gathered, root_bytes + static_cast<int64_t>(12 * H * H * 2));
  // Model state on the host: fp16 shards, fp32 master weights and fp32
  // gradient shards (plain SGD keeps no state); activations are on the host too.
  const int64_t padded = padded_bytes(u, 1);
  EXPECT_GE(m.host_arena_bytes, (2 + 4 + 4) * padded / W);
  EXPECT_EQ(at_peak(BufferKind::OptimizerState), 0);
  EXPECT_LE(m.device_arena_bytes, int64_t{38} << 30);
  EXPECT_LT(m.device_arena_bytes, m.naive_bytes);
}

// GPT-1T with a unit per block and nothing offloaded needs 134 GiB per
// A100-40GB; the planner's only fitting change is the blog's: each linear
// its own unit, parameters and activations offloaded.
TEST(Fit, Gpt1TWithBlockUnitsIsToldToWrapEachLinearAndOffload) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/gpt-1t.fsdp");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  Spec blocks = *r.spec;
  blocks.units = policy_units(blocks.model, UnitPolicy::EachBlock);
  blocks.parallel.offload = Offload::None;
  blocks.parallel.offload_activations = false;
  const Hardware hw = *find_hardware("a100-40g");
  EXPECT_FALSE(make_plan(blocks, hw).fits);
  const std::vector<Alternative> alts = fitting_alternatives(blocks, hw);
  ASSERT_FALSE(alts.empty());
  EXPECT_EQ(alts[0].change, "units { each linear }, offload { params = cpu  activations = cpu }");
  EXPECT_EQ(alts[0].peak_bytes, make_plan(*r.spec, hw).memory->device_arena_bytes);
}

// specs/llama3-8b.fsdp (Llama 3.1 8B, 8192 tokens, bf16, recompute) fits on
// one node of 8 H100s with room to spare, its plan verified, the rotary
// tables one persistent buffer of 8192 x 128 fp32 cos and sin values.
TEST(Planner, Llama3_8bFitsOnEightH100s) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/llama3-8b.fsdp");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_EQ(r.spec->parallel.world, 8);
  const Plan plan = make_plan(*r.spec, *find_hardware("h100-sxm"));
  EXPECT_TRUE(plan.fits);
  EXPECT_LT(plan.memory->device_arena_bytes, usable_bytes(*find_hardware("h100-sxm")) / 2);
  EXPECT_TRUE(verify_plan(*plan.schedule, *plan.memory).empty());
  int64_t rope = 0;
  for (const Buffer& b : plan.schedule->buffers)
    if (b.kind == BufferKind::RopeTables) rope += b.bytes;
  EXPECT_EQ(rope, 2 * 8192 * 64 * 4);
}

// A spec that plans checkpoints gets one persistent host buffer the size of
// a rank's shard file (fp32 master weights and AdamW's m and v: 12 bytes per
// shard element, whatever the param dtype), shown in the memory table; the
// device arena is unchanged. Without checkpoints there is none.
TEST(Memory, CheckpointStagingIsAShardFileInTheHostArena) {
  auto spec_text = [](const std::string& checkpoint) {
    return "model m { vocab = 256 context = 64 width = 64 heads = 2 layers = 2 }\n"
           "parallel { world = 4 sharding = full_shard\n"
           "  precision { param = bf16 reduce = bf16 master = fp32 } }\n"
           "train { micro_batch = 1\n" +
           checkpoint + "}\n";
  };
  FrontendResult with = load_spec_text("with.fsdp", spec_text("checkpoint(every = 10)\n"));
  FrontendResult without = load_spec_text("without.fsdp", spec_text(""));
  ASSERT_TRUE(with.spec) << with.diagnostics;
  ASSERT_TRUE(without.spec) << without.diagnostics;
  const Hardware hw = *find_hardware("h100-sxm");
  const Plan a = make_plan(*with.spec, hw), b = make_plan(*without.spec, hw);
  int64_t shard_elems = 0;
  for (const FlatUnit& u : a.schedule->units.units)
    shard_elems += u.padded_elems > 0 ? u.shard_elems : 0;
  ASSERT_GT(shard_elems, 0);
  std::vector<Buffer> staging;
  for (const Buffer& buf : a.schedule->buffers)
    if (buf.kind == BufferKind::CheckpointStaging) staging.push_back(buf);
  ASSERT_EQ(staging.size(), 1u);
  EXPECT_EQ(staging[0].space, MemSpace::Host);
  EXPECT_TRUE(staging[0].persistent);
  EXPECT_EQ(staging[0].bytes, 12 * shard_elems);
  EXPECT_GE(a.memory->host_arena_bytes, staging[0].bytes);
  EXPECT_EQ(a.memory->device_arena_bytes, b.memory->device_arena_bytes);
  EXPECT_TRUE(verify_plan(*a.schedule, *a.memory).empty());
  const std::string table = print_memory_plan(*a.schedule, *a.memory);
  EXPECT_NE(table.find(fmt::format("  checkpoint_staging {:>14} {:>14} (host arena)\n",
                                   staging[0].bytes, staging[0].bytes)),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("host arena (checkpoint staging): "), std::string::npos) << table;

  for (const Buffer& buf : b.schedule->buffers)
    EXPECT_NE(buf.kind, BufferKind::CheckpointStaging) << buf.name;
  EXPECT_EQ(b.memory->host_arena_bytes, 0);
  EXPECT_EQ(print_memory_plan(*b.schedule, *b.memory).find("checkpoint_staging"),
            std::string::npos);
}

// A deep model at 16K tokens whose checkpointed block inputs (240 x 128 MiB)
// overflow an A100-40GB: offloading them is among the changes that fit (with
// each linear its own unit, tune's search finds), and it cuts the device
// peak by more than half.
TEST(Planner, ActivationOffloadIsSuggestedWhenBlockInputsOverflow) {
  FrontendResult r = load_spec_text(
      "deep.fsdp",
      "model deep { vocab = 256 context = 16384 width = 4096 heads = 32 layers = 240 }\n"
      "parallel { world = 64 sharding = full_shard recompute = block\n"
      "  precision { param = bf16 reduce = bf16 master = fp32 } }\n"
      "train { micro_batch = 1 }\n");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  const Hardware hw = *find_hardware("a100-40g");
  const Plan plain = make_plan(*r.spec, hw);
  EXPECT_FALSE(plain.fits);
  const std::vector<Alternative> alts = fitting_alternatives(*r.spec, hw);
  auto offloaded = std::find_if(alts.begin(), alts.end(), [](const Alternative& a) {
    return a.change == "units { each linear }, offload { params = none  activations = cpu }";
  });
  ASSERT_NE(offloaded, alts.end());
  EXPECT_LT(offloaded->peak_bytes * 2, plain.memory->device_arena_bytes);
  Spec s = *r.spec;
  s.parallel.offload_activations = true;
  const Plan p = make_plan(s, hw);
  EXPECT_TRUE(p.fits);
  EXPECT_TRUE(verify_plan(*p.schedule, *p.memory).empty());
  EXPECT_GE(p.memory->host_arena_bytes, 240LL * 16384 * 4096 * 2 / 2);  // most block inputs
}

// The host arena must fit the rank's share of its node's RAM: GPT-175B with
// its parameters' state offloaded over only 16 A100-80GB (1152 GiB per node
// of 8) fits the devices but not the hosts, and over 32 it fits both; on a
// CPU both arenas share one RAM.
TEST(Planner, OffloadMustFitTheHostToo) {
  const Hardware hw = *find_hardware("a100-80g");
  EXPECT_EQ(hw.host_memory_bytes, int64_t{144} << 30);
  auto offloaded = [&](int64_t world) {
    FrontendResult r =
        load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/gpt-175b.fsdp", {world, {}});
    EXPECT_TRUE(r.spec) << r.diagnostics;
    Spec s = *r.spec;
    s.parallel.offload = Offload::Cpu;
    return make_plan(s, hw);
  };
  const Plan sixteen = offloaded(16);
  EXPECT_LE(sixteen.memory->device_arena_bytes, usable_bytes(hw));
  EXPECT_GT(sixteen.memory->host_arena_bytes, usable_host_bytes(hw));
  EXPECT_FALSE(sixteen.fits);
  const Plan thirty_two = offloaded(32);
  EXPECT_LE(thirty_two.memory->host_arena_bytes, usable_host_bytes(hw));
  EXPECT_TRUE(thirty_two.fits);
  // One RAM: a CPU plan fits only if both arenas fit it together.
  MemoryPlan m;
  const Hardware cpu = *find_hardware("cpu");
  m.device_arena_bytes = usable_bytes(cpu) / 2 + 1;
  m.host_arena_bytes = usable_bytes(cpu) / 2;
  EXPECT_FALSE(plan_fits(m, cpu));
  m.device_arena_bytes -= 1;
  EXPECT_TRUE(plan_fits(m, cpu));
}

// The one entry to the planner: every step in kPlanSteps' order from
// nothing, only the steps a plan lacks when it brings some (tune brings
// schedules), verify always, stop_after honoured, and a spec whose
// activations are past the limit stopped at lower as the user's.
TEST(Planner, OneEntryRunsTheStepsAPlanLacks) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/tiny.fsdp");
  ASSERT_TRUE(r.spec);
  const Hardware& hw = *find_hardware("cpu");
  std::vector<PlanStep> ran;
  const PlanStepHook record = [&](PlanStep step, const std::function<Failure()>& run) {
    ran.push_back(step);
    return run();
  };
  Plan full;
  run_plan(*r.spec, hw, {}, full, record);
  EXPECT_EQ(ran, std::vector<PlanStep>(kPlanSteps.begin(), kPlanSteps.end()));
  ASSERT_EQ(full.failure, Failure::None);
  ASSERT_TRUE(full.units && full.schedule && full.memory && full.timeline);
  EXPECT_TRUE(full.fits);
  EXPECT_EQ(full.violations, std::vector<std::string>{});

  ran.clear();
  Plan from_schedule;
  from_schedule.schedule = *full.schedule;
  run_plan(*r.spec, hw, {}, from_schedule, record);
  EXPECT_EQ(ran, (std::vector<PlanStep>{PlanStep::Memory, PlanStep::Verify, PlanStep::Cost}));
  EXPECT_FALSE(from_schedule.units);
  EXPECT_EQ(from_schedule.memory->device_arena_bytes, full.memory->device_arena_bytes);
  EXPECT_EQ(from_schedule.timeline->step_ms, full.timeline->step_ms);
  EXPECT_EQ(from_schedule.fits, full.fits);

  PlanOptions to_schedule;
  to_schedule.stop_after = PlanStep::Schedule;
  const Plan partial = make_plan(*r.spec, hw, to_schedule);
  EXPECT_TRUE(partial.schedule);
  EXPECT_FALSE(partial.memory);
  EXPECT_EQ(print_schedule(*partial.schedule), print_schedule(*full.schedule));

  Spec big = *r.spec;
  big.train.micro_batch = int64_t{1} << 20;
  big.model.context = int64_t{1} << 22;
  const Plan refused = make_plan(big, hw);
  EXPECT_EQ(refused.failure, Failure::User);
  EXPECT_EQ(refused.error, activations_size_error(big, false));
  EXPECT_NE(refused.error, "");
  EXPECT_FALSE(refused.units);
}

}  // namespace
}  // namespace fsdpgen::test
