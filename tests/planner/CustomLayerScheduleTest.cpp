// CustomLayerScheduleTest: schedules and memory plans of the planner with
// custom layers (CustomLayerPlan.h) in place of every block's mlp, for small
// gpt2 and llama models:
//   1. schedules over every strategy, recompute, accumulation and each block /
//      each linear pass the verifier; every recompute has the backward
//      scratch (custom_out's home) exactly when custom layers exist; the
//      recomputes are counted: under each linear the custom mlp shares its
//      unit with the norm before it (ln_2 / post_attention_layernorm) and is
//      recomputed, and in a unit of its own (the norm split off by hand) it
//      is still recomputed, where a built-in block's last piece is skipped;
//   2. the memory plan's peak grows by exactly the hand-computed bytes from
//      GeluMlp to SwiGluMlp (parameters and their state, saved arrays,
//      backward scratch);
//   3. activations past 2^60 bytes are an error naming micro_batch and context.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "codegen/planner/Verify.h"
#include "dsl/CustomLayers.h"
#include "dsl/Layers.h"
#include "dsl/Units.h"
#include "tests/planner/CustomLayerPlan.h"

namespace fsdpgen::test {
namespace {

// ---- 1. schedules ------------------------------------------------------------

struct Plan {
  Spec spec;
  Schedule schedule;
  MemoryPlan memory;
};

Plan plan(const Knobs& k, Layer l, const ScheduleOptions& options = {}) {
  Plan p;
  p.spec = make_spec(k, l);
  p.schedule = build_schedule(lower(p.spec), options);
  p.memory = plan_memory(p.schedule);
  return p;
}

// Units a block gets under each linear (a norm joins the linear after it):
//   gpt2   [ln_1 c_attn] [c_proj] [ln_2 c_fc] [c_proj]       custom: [ln_1 c_attn] [c_proj] [ln_2
//   mlp] llama  [norm q] [k] [v] [o] [norm gate] [up] [down]       custom: [norm q] [k] [v] [o]
//   [norm mlp]
int hand_units_per_block(Family f, Layer l) {
  if (f == Family::Gpt2) return l == Layer::None ? 4 : 3;
  return l == Layer::None ? 7 : 5;
}
// Recomputes a block gets under recompute = block in one micro-batch: one per
// segment, but a built-in block's last piece (it writes only the block's
// output) is skipped; a custom mlp saves arrays and is rebuilt.
int hand_recomputes_per_block(Family f, Layer l, bool each_linear) {
  if (!each_linear) return 1;
  return hand_units_per_block(f, l) - (l == Layer::None ? 1 : 0);
}

TEST(CustomLayerPlan, SchedulesVerifyAndRecomputesGetTheScratch) {
  int checked = 0, recompute_plans = 0;
  for (Family f : {Family::Gpt2, Family::Llama})
    for (Layer l : {Layer::None, Layer::Gelu, Layer::SwiGlu})
      for (const char* st :
           {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"})
        for (const char* units : {"each block", "each linear"})
          for (const char* rc : {"none", "block"})
            for (auto [mb, red] : {std::pair{1, "every"}, {3, "last"}, {2, "every"}}) {
              Knobs k;
              k.family = f;
              k.sharding = st;
              k.world = std::string(st).rfind("hybrid", 0) == 0 ? 4 : 2;
              k.units = units;
              k.recompute = rc;
              k.micro_batches = mb;
              k.reduce = red;
              k.dtype = checked % 2 ? "bf16" : "fp32";
              ScheduleOptions options;
              options.flash_attention = checked % 3 == 0;
              const Plan p = plan(k, l, options);
              const std::string what = fmt::format(
                  "{} + {} {} {} recompute={} mb={} {} {} {}", to_string(f), layer_label(l), st,
                  units, rc, mb, red, k.dtype, options.flash_attention ? "flash" : "");
              const std::vector<std::string> errors = verify_plan(p.schedule, p.memory);
              EXPECT_TRUE(errors.empty())
                  << what << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
              const bool each_linear = std::string(units) == "each linear";
              const Units& u = p.schedule.units;
              if (each_linear) {
                EXPECT_EQ(u.units.size(), 1u + kL * hand_units_per_block(f, l)) << what;
              }
              const ActivationShape shape{2 * kT, k.dtype == "bf16" ? 2 : 4,
                                          options.flash_attention};
              int recomputes = 0;
              for (const Op& op : p.schedule.ops) {
                if (op.kind != OpKind::Recompute) continue;
                ++recomputes;
                const int scratch = op.operand(Role::Scratch);
                if (l == Layer::None) {
                  EXPECT_EQ(scratch, -1) << what << " " << op.label();
                  continue;
                }
                ASSERT_GE(scratch, 0) << what << " " << op.label();
                const Buffer& b = p.schedule.buffers[static_cast<size_t>(scratch)];
                EXPECT_EQ(b.kind, BufferKind::BackwardScratch) << what << " " << op.label();
                EXPECT_EQ(b.micro_batch, op.micro_batch) << what << " " << op.label();
                EXPECT_EQ(b.bytes, hand_scratch_bytes(f, l, shape.tokens, shape.act_bytes,
                                                      shape.flash_attention))
                    << what;
              }
              const int want = std::string(rc) == "block"
                                   ? mb * kL * hand_recomputes_per_block(f, l, each_linear)
                                   : 0;
              EXPECT_EQ(recomputes, want) << what;
              recompute_plans += recomputes > 0;

              // Each linear with a custom layer: the mlp is the last piece of
              // its unit, which holds no other piece of the family's mlp, and
              // (recompute = block) it is recomputed once per micro-batch.
              if (each_linear && l != Layer::None) {
                int mlp_units = 0;
                for (const FlatUnit& unit : u.units) {
                  bool has_custom = false;
                  for (const LayerId& id : unit.layers)
                    if (id.kind == LayerId::Kind::Block && !id.whole() &&
                        block_piece(p.spec.model, id.piece).custom >= 0)
                      has_custom = true;
                  if (!has_custom) continue;
                  ++mlp_units;
                  ASSERT_EQ(unit.layers.size(), 2u) << what << " " << unit.name;  // norm, mlp
                  EXPECT_EQ(block_piece(p.spec.model, unit.layers[1].piece).name, "mlp") << what;
                  EXPECT_FALSE(block_piece(p.spec.model, unit.layers[0].piece).linear)
                      << what << " " << unit.name;
                  int mlp_recomputes = 0;
                  for (const Op& op : p.schedule.ops)
                    if (op.kind == OpKind::Recompute && op.unit == unit.index) {
                      ++mlp_recomputes;
                      // ...running just the layer (the norm has no FLOPs).
                      EXPECT_DOUBLE_EQ(op.flops, (l == Layer::Gelu ? 4.0 : 6.0) * kC *
                                                     layer_d_ff(f, l) * shape.tokens)
                          << what;
                    }
                  EXPECT_EQ(mlp_recomputes, std::string(rc) == "block" ? mb : 0)
                      << what << " " << unit.name;
                }
                EXPECT_EQ(mlp_units, kL) << what;
              }
              ++checked;
            }
  EXPECT_EQ(checked, 2 * 3 * 5 * 2 * 2 * 3);
  EXPECT_EQ(recompute_plans, checked / 2);
}

// Under each linear the norm before the mlp joins it (above), so the mlp's
// segment has two layers and the schedule's skip rule (a recompute of a
// block's last piece alone, which writes only the block's output, is left
// out: dsl/Layers' writes_only_block_output) never meets it. Here the norm
// is split off into its own unit, so that the mlp is the only layer of its
// unit and segment: the built-in last piece (mlp.c_proj, mlp.down_proj) is
// still skipped, the custom mlp (it saves arrays for its backward) is not.
// Units a block gets, and its recomputes a micro-batch:
//   gpt2   [ln_1 c_attn] [c_proj] [ln_2] [c_fc] [c_proj]: 5, 4;  custom [..] [..] [ln_2] [mlp]: 4,
//   4 llama  [norm q] [k] [v] [o] [norm] [gate] [up] [down]: 8, 7;  custom [..]x4 [norm] [mlp]: 6,
//   6
TEST(CustomLayerPlan, AnMlpAloneInItsUnitIsRecomputed) {
  int checked = 0;
  for (Family f : {Family::Gpt2, Family::Llama})
    for (Layer l : {Layer::None, Layer::Gelu, Layer::SwiGlu})
      for (const char* st : {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard_zero2"})
        for (int mb : {1, 2}) {
          Knobs k;
          k.family = f;
          k.sharding = st;
          k.world = std::string(st).rfind("hybrid", 0) == 0 ? 4 : 2;
          k.units = "each linear";
          k.recompute = "block";
          k.micro_batches = mb;
          Spec spec = make_spec(k, l);
          std::vector<UnitSpec> units;
          for (const UnitSpec& u : spec.units.units) {
            const bool norm_then_mlp =
                u.layers.size() == 2 && u.layers[0].kind == LayerId::Kind::Block &&
                !u.layers[0].whole() && !block_piece(spec.model, u.layers[0].piece).linear &&
                block_piece(spec.model, u.layers[1].piece).name.rfind("mlp", 0) == 0;
            if (!norm_then_mlp) {
              units.push_back(u);
              continue;
            }
            for (const LayerId& id : u.layers)
              units.push_back({auto_unit_name(spec.model, {id}), {id}});
          }
          spec.units.units = units;
          const std::string what =
              fmt::format("{} + {} {} mb={}", to_string(f), layer_label(l), st, mb);
          const int per_block =
              f == Family::Gpt2 ? (l == Layer::None ? 5 : 4) : (l == Layer::None ? 8 : 6);
          const int recomputed = f == Family::Gpt2 ? 4 : (l == Layer::None ? 7 : 6);
          ASSERT_EQ(units.size(), 1u + kL * per_block) << what;
          const Schedule s = build_schedule(lower(spec));
          const MemoryPlan m = plan_memory(s);
          const std::vector<std::string> errors = verify_plan(s, m);
          EXPECT_TRUE(errors.empty())
              << what << ":\n  " << fmt::format("{}", fmt::join(errors, "\n  "));
          int recomputes = 0, last_piece = 0;
          for (const Op& op : s.ops) {
            if (op.kind != OpKind::Recompute) continue;
            ++recomputes;
            const Segment& seg = s.units.segments[static_cast<size_t>(op.segment)];
            if (seg.layers.size() == 1 &&
                seg.layers[0].piece == block_piece_count(spec.model) - 1) {
              ++last_piece;
              EXPECT_NE(l, Layer::None) << what << ": a built-in last piece is recomputed";
              EXPECT_GE(op.operand(Role::Scratch), 0) << what;
            }
          }
          EXPECT_EQ(recomputes, mb * kL * recomputed) << what;
          EXPECT_EQ(last_piece, l == Layer::None ? 0 : mb * kL) << what;
          ++checked;
        }
  EXPECT_EQ(checked, 2 * 3 * 4 * 2);
}

// ---- 2. the memory plan ------------------------------------------------------

// gpt2, one micro-batch, no recompute, no_shard at world 1 (every buffer's
// bytes are its own, none split over ranks): GeluMlp(512) against
// SwiGluMlp(344). The peak is the last backward (block 0's): every unit's
// gradients are live by then, the later blocks' saved arrays and the logits
// are freed. So the peak grows by, by hand:
//   parameters: a block's mlp is 2CF + F + C = 131,712 elements with GeluMlp,
//     3 C 344 = 132,096 with SwiGluMlp (each tensor a multiple of 16): 384 more a
//     block, 1,152 for L = 3; the block units (198,272 and 198,656 elements)
//     split into whole 256-byte shards in fp32 and bf16, so no padding moves.
//     Each element is held as the param dtype, the fp32 master (bf16 only),
//     AdamW's m and v (fp32) and an fp32 gradient (world 1 accumulates in fp32);
//   block 0's saved arrays: a N (3 * 344 - 2 * 512 = 8);
//   the backward scratch: a N (2 * 344 - 512 = 176), dgate_up against dact.
TEST(CustomLayerPlan, PeakGrowsByTheHandComputedDelta) {
  for (const char* dtype : {"fp32", "bf16"}) {
    Knobs k;
    k.sharding = "no_shard";
    k.world = 1;
    k.dtype = dtype;
    const Plan gelu = plan(k, Layer::Gelu), swiglu = plan(k, Layer::SwiGlu);
    ASSERT_TRUE(verify_plan(gelu.schedule, gelu.memory).empty());
    ASSERT_TRUE(verify_plan(swiglu.schedule, swiglu.memory).empty());
    const bool bf16 = k.dtype == "bf16";
    const int64_t a = bf16 ? 2 : 4, N = 2 * kT;
    for (const Plan* p : {&gelu, &swiglu}) {
      const Op& op = p->schedule.ops[static_cast<size_t>(p->memory.peak_op)];
      EXPECT_EQ(op.kind, OpKind::Backward) << dtype << " " << op.label();
      const Segment& seg = p->schedule.units.segments[static_cast<size_t>(op.segment)];
      EXPECT_EQ(seg.layers.front(), kBlock0) << dtype << " " << op.label();
    }
    const int64_t params = kL * (3 * 344 * kC - (2 * kC * kGpt2F + kGpt2F + kC));
    EXPECT_EQ(params, 1152);
    const int64_t per_param = a + (bf16 ? 4 : 0) + 2 * 4 + 4;
    const int64_t saved = a * N * (3 * 344 - 2 * kGpt2F);
    const int64_t scratch = a * N * (2 * 344 - kGpt2F);
    auto at_peak = [](const Plan& p, BufferKind kind) {
      return p.memory.peak_by_kind[static_cast<size_t>(kind)];
    };
    EXPECT_EQ(at_peak(swiglu, BufferKind::Activations) - at_peak(gelu, BufferKind::Activations),
              saved)
        << dtype;
    EXPECT_EQ(
        at_peak(swiglu, BufferKind::BackwardScratch) - at_peak(gelu, BufferKind::BackwardScratch),
        scratch)
        << dtype;
    EXPECT_EQ(at_peak(swiglu, BufferKind::ParamShard) - at_peak(gelu, BufferKind::ParamShard),
              params * a)
        << dtype;
    EXPECT_EQ(swiglu.memory.device_arena_bytes - gelu.memory.device_arena_bytes,
              params * per_param + saved + scratch)
        << dtype;
    // fp32: 1,152 * 16 + 2,048 + 45,056 = 65,536; bf16: 1,152 * 18 + 1,024 + 22,528 = 44,288.
    EXPECT_EQ(params * per_param + saved + scratch, bf16 ? 44288 : 65536);
  }
}

// ---- 3. sizes past 64-bit byte counts ----------------------------------------

// A GeluMlp of d_ff 2^30 saves 2^31 elements per token per block (a bound
// layer's limit is 2^40): at 64 tokens its activations are planned; at the
// largest micro_batch and context the DSL takes (2^20 x 2^22 tokens) they
// would be ~2^76 bytes, which int64 byte counts wrap, so the planner refuses
// them naming the keys, before it lays anything out.
TEST(CustomLayerPlan, ActivationsPastTheLimitAreAnError) {
  Spec spec = make_spec({}, Layer::None);
  std::string error;
  std::optional<CustomLayerSpec> c =
      bind_custom_layer("mlp", golden_decl(Layer::Gelu),
                        {{"d_model", spec.model.width}, {"d_ff", int64_t{1} << 30}}, {}, &error);
  ASSERT_TRUE(c.has_value()) << error;
  spec.model.custom.push_back(*c);
  for (bool flash : {false, true}) {
    EXPECT_EQ(activations_size_error(spec, flash), "") << flash;
    Spec big = spec;
    big.train.micro_batch = int64_t{1} << 20;
    big.model.context = int64_t{1} << 22;
    const std::string e = activations_size_error(big, flash);
    EXPECT_NE(e.find("4398046511104 tokens (train.micro_batch 1048576 x model.context 4194304)"),
              std::string::npos)
        << e;
    EXPECT_NE(e.find("past the planner's limit of 2^60"), std::string::npos) << e;
  }
  // Accumulated micro-batches count: 2^16 of them at 2^20 x 2^4 tokens of
  // 2^33 bytes per block x 3 blocks are past 2^60 bytes, one is not.
  Spec many = spec;
  many.train.micro_batch = int64_t{1} << 20;
  many.model.context = 16;
  EXPECT_EQ(activations_size_error(many, true), "");
  many.parallel.accumulate.micro_batches = 65536;
  EXPECT_NE(activations_size_error(many, true).find("65536 micro-batches"), std::string::npos);
}

}  // namespace
}  // namespace fsdpgen::test
