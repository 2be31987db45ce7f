// CustomLayerPlanTest: the planner with custom layers (DESIGN §9) in place of
// the family module "mlp" of every block, built without Clang from the
// example layers' checked-in reader output (tests/layers/golden: GeluMlp and
// SwiGluMlp) and bound with dsl/CustomLayers' bind_custom_layer, for small
// gpt2 and llama models:
//   1. a block's saved bytes and the backward scratch equal sums by hand: the
//      family's rows less the replaced module's, plus the layer's arrays
//      (with flash attention and without); the scratch gains custom_out and
//      the layer's scratch;
//   2. the block's input is still found, and a model without custom layers
//      keeps its family's table, byte for byte (a regression guard);
//   3. forward FLOPs of a block and of a model, by hand;
//   4. schedules over every strategy, recompute, accumulation and each block /
//      each linear pass the verifier; every recompute has the backward
//      scratch (custom_out's home) exactly when custom layers exist; the
//      recomputes are counted: under each linear the custom mlp shares its
//      unit with the norm before it (ln_2 / post_attention_layernorm) and is
//      recomputed, and in a unit of its own (the norm split off by hand) it
//      is still recomputed, where a built-in block's last piece is skipped;
//   5. the memory plan's peak grows by exactly the hand-computed bytes from
//      GeluMlp to SwiGluMlp (parameters and their state, saved arrays,
//      backward scratch);
//   6. activations past 2^60 bytes are an error naming micro_batch and context.
// Every expectation is written from the dimensions, not by the function
// under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Schedule.h"
#include "codegen/planner/Verify.h"
#include "dsl/CustomLayers.h"
#include "dsl/Frontend.h"
#include "dsl/Layers.h"
#include "dsl/Units.h"
#include "dsl/layer_reader/LayerDecl.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

enum class Layer { None, Gelu, SwiGlu };

std::string layer_label(Layer l) {
  return l == Layer::None ? "built-in" : l == Layer::Gelu ? "GeluMlp" : "SwiGluMlp";
}

const layers::LayerDecl& golden_decl(Layer l) {
  static const std::map<Layer, layers::LayerDecl> decls = [] {
    std::map<Layer, layers::LayerDecl> out;
    for (auto [which, file] :
         {std::pair{Layer::Gelu, "gelu_mlp.json"}, std::pair{Layer::SwiGlu, "swiglu_mlp.json"}}) {
      std::ifstream in(fs::path(FSDPGEN_SOURCE_DIR) / "tests/layers/golden" / file);
      std::stringstream s;
      s << in.rdbuf();
      std::string error;
      auto parsed = layers::parse_layer_json(s.str(), &error);
      EXPECT_TRUE(parsed && parsed->size() == 1) << file << ": " << error;
      if (parsed && !parsed->empty()) out[which] = (*parsed)[0];
    }
    return out;
  }();
  return decls.at(l);
}

// Small models: N = micro_batch 2 x context 32 = 64 tokens in a plan (15 and
// 64 in the layout checks). Every array's byte count is a multiple of 4 for
// these sizes, so no row is padded to its alignment and the sums below need
// no rounding.
//   gpt2:  C = 128, H = 4, T = 32, F = 4C = 512, L = 3, V = 256 (tied)
//   llama: C = 128, H = 4, KV = 2 heads x 32 = 64, F = 352, L = 3, V = 256
constexpr int64_t kC = 128, kH = 4, kT = 32, kV = 256, kL = 3;
constexpr int64_t kGpt2F = 512, kLlamaF = 352, kLlamaKV = 64;

struct Knobs {
  Family family = Family::Gpt2;
  std::string sharding = "full_shard";
  std::string units = "each block";
  std::string recompute = "none";
  int micro_batches = 1;
  std::string reduce = "every";
  std::string dtype = "fp32";
  int world = 2;
};

std::string spec_text(const Knobs& k) {
  const bool hybrid = k.sharding.rfind("hybrid", 0) == 0;
  const std::string model =
      k.family == Family::Gpt2
          ? fmt::format(
                "model g {{ family = gpt2 vocab = {} context = {} width = {} heads = {} "
                "layers = {} }}\n",
                kV, kT, kC, kH, kL)
          : fmt::format(
                "model l {{ family = llama vocab = {} context = {} width = {} heads = {} "
                "kv_heads = 2 layers = {} ffn_hidden = {} tie_embeddings = false }}\n",
                kV, kT, kC, kH, kL, kLlamaF);
  return model + fmt::format(
                     "units {{ {} }}\n"
                     "parallel {{ world = {} sharding = {} {} ranks_per_node = {}\n"
                     "  precision {{ param = {} reduce = {} master = fp32 }}\n"
                     "  recompute = {} accumulate {{ micro_batches = {} reduce = {} }} }}\n"
                     "train {{ micro_batch = 2 }}\n",
                     k.units, k.world, k.sharding,
                     hybrid ? fmt::format("shard_group = {}", k.world / 2) : "", k.world, k.dtype,
                     k.dtype, k.recompute, k.micro_batches, k.reduce);
}

// d_ff of the layer as the tests bind it: the family's own hidden width,
// except SwiGluMlp in gpt2, bound to 344 as examples/layers/gpt2-swiglu.fsdp.
int64_t layer_d_ff(Family f, Layer l) {
  if (f == Family::Gpt2) return l == Layer::SwiGlu ? 344 : kGpt2F;
  return kLlamaF;
}

// The checked spec of `k` with `layer` in place of every block's mlp, its
// units resolved again for the model with the layer.
Spec make_spec(const Knobs& k, Layer layer) {
  FrontendResult r = load_spec_text("custom.fsdp", spec_text(k));
  EXPECT_TRUE(r.spec.has_value()) << r.diagnostics << "\n" << spec_text(k);
  if (!r.spec) return {};
  Spec spec = *r.spec;
  const UnitPolicy policy =
      k.units == "each linear" ? UnitPolicy::EachLinear : UnitPolicy::EachBlock;
  // The helper below resolves units as the front end does: same units for
  // the model without a custom layer.
  EXPECT_EQ(policy_units(spec.model, policy).units, spec.units.units) << k.units;
  if (layer == Layer::None) return spec;
  std::string error;
  std::optional<CustomLayerSpec> c =
      bind_custom_layer("mlp", golden_decl(layer),
                        {{"d_model", spec.model.width}, {"d_ff", layer_d_ff(k.family, layer)}},
                        {{"d_model", "width"}, {"d_ff", ""}}, &error);
  EXPECT_TRUE(c.has_value()) << error;
  if (!c) return spec;
  spec.model.layer_headers = {layer == Layer::Gelu ? "gelu_mlp.h" : "swiglu_mlp.h"};
  c->header = spec.model.layer_headers.front();
  spec.model.custom.push_back(*c);
  const UnitsSpec units = policy_units(spec.model, policy);
  spec.units.units = units.units;
  spec.units.policy = units.policy;
  return spec;
}

ModelSpec make_model(Family f, Layer layer) {
  Knobs k;
  k.family = f;
  return make_spec(k, layer).model;
}

// ---- 1. saved bytes and backward scratch, by hand ----------------------------

// Elements per token the layer saves and its scratch (the goldens' extents).
int64_t layer_saved_elems(Family f, Layer l) {
  if (l == Layer::None) return 0;
  const int64_t F = layer_d_ff(f, l);
  return l == Layer::Gelu ? 2 * F : 3 * F;  // pre, act / gate, up, hidden
}
int64_t layer_scratch_elems(Family f, Layer l) {
  if (l == Layer::None) return 0;
  const int64_t F = layer_d_ff(f, l);
  return l == Layer::Gelu ? F : 2 * F;  // dact / dgate_up
}

// A block's saved bytes over N tokens of a bytes.
//   gpt2   4 fp32 statistics (ln1, ln2 mean and rstd)
//          + a * (input, ln1, qkv 3C, attn, res2, ln2 = 8C) + mlp rows (fc, gelu = 2F)
//          + probs a * H*T, or lse 4 * H
//   llama  2 fp32 rstd + (flash) lse 4 * H
//          + a * (input, rms1, q, attn, res2, rms2 = 6C; k, v = 2KV) + mlp rows (gate, up,
//          swiglu = 3F) + probs a * H*T
// A custom mlp drops the mlp rows (the norm statistics before it stay) and
// adds its own saved arrays.
int64_t hand_saved_bytes(Family f, Layer l, int64_t N, int64_t a, bool flash) {
  const int64_t attention = flash ? 4 * kH * N : a * kH * kT * N;
  if (f == Family::Gpt2) {
    const int64_t mlp = l == Layer::None ? 2 * kGpt2F : layer_saved_elems(f, l);
    return 16 * N + a * N * (8 * kC + mlp) + attention;
  }
  const int64_t mlp = l == Layer::None ? 3 * kLlamaF : layer_saved_elems(f, l);
  return 8 * N + a * N * (6 * kC + 2 * kLlamaKV + mlp) + attention;
}

// The backward scratch: dres and dtmp (2C) and the largest intermediate
// gradient (gpt2: max(3C + H*T, 2F); llama: max(3C + H*T, 3F, C + 2KV)), with
// flash a fp32 delta per head; a custom layer adds custom_out (C) and its scratch.
int64_t hand_scratch_bytes(Family f, Layer l, int64_t N, int64_t a, bool flash) {
  const int64_t probs = flash ? 0 : kH * kT;
  const int64_t big = f == Family::Gpt2
                          ? std::max(3 * kC + probs, 2 * kGpt2F)
                          : std::max({3 * kC + probs, 3 * kLlamaF, kC + 2 * kLlamaKV});
  int64_t bytes = a * N * (2 * kC + big) + (flash ? 4 * kH * N : 0);
  if (l != Layer::None) bytes += a * N * (kC + layer_scratch_elems(f, l));
  return bytes;
}

const LayerId kBlock0{LayerId::Kind::Block, 0};

TEST(CustomLayerPlan, SavedBytesAreTheFamilysRowsLessTheMlpsPlusTheLayers) {
  for (Family f : {Family::Gpt2, Family::Llama})
    for (Layer l : {Layer::None, Layer::Gelu, Layer::SwiGlu}) {
      const ModelSpec m = make_model(f, l);
      for (int64_t N : {15, 64})
        for (int64_t a : {2, 4})
          for (bool flash : {false, true}) {
            const ActivationShape shape{N, a, flash};
            const std::string what = fmt::format("{} + {} N={} a={} {}", to_string(f),
                                                 layer_label(l), N, a, flash ? "flash" : "");
            EXPECT_EQ(layer_saved_bytes(m, kBlock0, shape), hand_saved_bytes(f, l, N, a, flash))
                << what;
            EXPECT_EQ(backward_scratch_bytes(m, shape), hand_scratch_bytes(f, l, N, a, flash))
                << what;
          }
    }
  // The cases the brief names, in numbers (N = 64, a = 4, materialized):
  // gpt2 + GeluMlp saves what the built-in block saves (fc, gelu -> pre, act);
  // gpt2 + SwiGluMlp(344) saves 3 * 344 - 2 * 512 = 8 more elements a token.
  const ActivationShape s{64, 4, false};
  const int64_t gpt2 = layer_saved_bytes(make_model(Family::Gpt2, Layer::None), kBlock0, s);
  EXPECT_EQ(gpt2, 64 * 16 + 4 * 64 * (8 * 128 + 2 * 512 + 4 * 32));
  EXPECT_EQ(layer_saved_bytes(make_model(Family::Gpt2, Layer::Gelu), kBlock0, s), gpt2);
  EXPECT_EQ(layer_saved_bytes(make_model(Family::Gpt2, Layer::SwiGlu), kBlock0, s),
            gpt2 + 4 * 64 * 8);
  // llama + SwiGluMlp(F) saves what llama's own MLP does; + GeluMlp(F) one F less.
  const int64_t llama = layer_saved_bytes(make_model(Family::Llama, Layer::None), kBlock0, s);
  EXPECT_EQ(layer_saved_bytes(make_model(Family::Llama, Layer::SwiGlu), kBlock0, s), llama);
  EXPECT_EQ(layer_saved_bytes(make_model(Family::Llama, Layer::Gelu), kBlock0, s),
            llama - 4 * 64 * kLlamaF);
}

// The rows themselves: the replaced pieces' rows are gone, the layer's are
// named <module>.<member>, the rest keep their family order.
TEST(CustomLayerPlan, SavedRowsNameTheLayersArrays) {
  auto names = [](const ModelSpec& m) {
    std::vector<std::string> out;
    const LayoutTable t = block_saved_layout(m);
    for (const model::Field& f : t.table())
      out.push_back(f.name);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(make_model(Family::Gpt2, Layer::Gelu)),
            (V{"ln1_mean", "ln1_rstd", "ln2_mean", "ln2_rstd", "input", "ln1", "qkv", "attn",
               "res2", "ln2", "probs", "lse", "mlp.pre", "mlp.act"}));
  EXPECT_EQ(names(make_model(Family::Llama, Layer::SwiGlu)),
            (V{"rms1_rstd", "rms2_rstd", "lse", "input", "rms1", "q", "k", "v", "attn", "res2",
               "rms2", "probs", "mlp.gate", "mlp.up", "mlp.hidden"}));
  auto scratch = [](const ModelSpec& m) {
    std::vector<std::string> out;
    const LayoutTable t = backward_scratch_layout(m);
    for (const model::Field& f : t.table())
      out.push_back(f.name);
    return out;
  };
  EXPECT_EQ(scratch(make_model(Family::Gpt2, Layer::Gelu)),
            (V{"dres", "dtmp", "big", "delta", "custom_out", "mlp.dact"}));
  EXPECT_EQ(scratch(make_model(Family::Llama, Layer::SwiGlu)),
            (V{"dres", "dtmp", "big", "delta", "custom_out", "mlp.dgate_up"}));
}

// ---- 2. the input's offset; no custom layer: the family table as it is -------

TEST(CustomLayerPlan, InputIsStillFoundAndBuiltInTablesAreUntouched) {
  for (Family f : {Family::Gpt2, Family::Llama})
    for (Layer l : {Layer::None, Layer::Gelu, Layer::SwiGlu})
      for (int64_t a : {2, 4})
        for (bool flash : {false, true}) {
          const ModelSpec m = make_model(f, l);
          const ActivationShape shape{64, a, flash};
          // gpt2: after 4 fp32 statistics; llama: after 2 and, with flash, lse (4 * H).
          const int64_t want = f == Family::Gpt2 ? 16 * 64 : 8 * 64 + (flash ? 4 * kH * 64 : 0);
          EXPECT_EQ(saved_field_offset_bytes(m, kBlock0, shape, "input"), want)
              << to_string(f) << " + " << layer_label(l) << " a=" << a << " flash=" << flash;
        }
  // The first array of the layer follows the attention's (materialized: probs
  // a * H*T a token after the 8C rows; flash: lse 4 * H).
  const ModelSpec gelu = make_model(Family::Gpt2, Layer::Gelu);
  EXPECT_EQ(saved_field_offset_bytes(gelu, kBlock0, {64, 2, false}, "mlp.pre"),
            16 * 64 + 2 * 64 * (8 * kC + kH * kT));
  EXPECT_EQ(saved_field_offset_bytes(gelu, kBlock0, {64, 2, true}, "mlp.act"),
            16 * 64 + 2 * 64 * 8 * kC + 4 * kH * 64 + 2 * 64 * kGpt2F);

  // Without custom layers the block's and the scratch's tables are the
  // family's own arrays (same rows, not copies), so every offset is the one
  // the runtime carves from runtime/model/gpt2.h and runtime/model/llama.h.
  struct Case {
    Family f;
    model::Table<model::Field> block, scratch;
  };
  for (const Case& c :
       {Case{Family::Gpt2, model::kGpt2BlockSaved, model::kGpt2BackwardScratch},
        Case{Family::Llama, model::kLlamaBlockSaved, model::kLlamaBackwardScratch}}) {
    const ModelSpec m = make_model(c.f, Layer::None);
    const LayoutTable block = block_saved_layout(m), scratch = backward_scratch_layout(m);
    EXPECT_EQ(block.table().rows, c.block.rows) << to_string(c.f);
    EXPECT_EQ(block.table().count, c.block.count) << to_string(c.f);
    EXPECT_EQ(scratch.table().rows, c.scratch.rows) << to_string(c.f);
    EXPECT_EQ(scratch.table().count, c.scratch.count) << to_string(c.f);
    for (bool flash : {false, true}) {
      model::Dims d{kC, c.f == Family::Gpt2 ? kGpt2F : kLlamaF, kH, kT,
                    c.f == Family::Gpt2 ? kC : kLlamaKV};
      d.flash = flash;
      for (const model::Field& row : c.block)
        EXPECT_EQ(saved_field_offset_bytes(m, kBlock0, {64, 2, flash}, row.name),
                  model::offset_bytes(c.block, model::index_of(c.block, row.name), d, 64, 2))
            << to_string(c.f) << " " << row.name;
    }
  }
  // And the built-in gpt2 block's offsets by hand (a = 2, N = 64, materialized):
  // input 16N, ln1 +C, qkv +C, attn +3C, res2 +C, ln2 +C, fc +C, gelu +F, probs +F.
  const ModelSpec gpt2 = make_model(Family::Gpt2, Layer::None);
  const int64_t N = 64, a = 2;
  const std::pair<const char*, int64_t> rows[] = {{"input", 0},
                                                  {"ln1", kC},
                                                  {"qkv", 2 * kC},
                                                  {"attn", 5 * kC},
                                                  {"res2", 6 * kC},
                                                  {"ln2", 7 * kC},
                                                  {"fc", 8 * kC},
                                                  {"gelu", 8 * kC + kGpt2F},
                                                  {"probs", 8 * kC + 2 * kGpt2F}};
  for (auto [name, elems] : rows)
    EXPECT_EQ(saved_field_offset_bytes(gpt2, kBlock0, {N, a, false}, name), 16 * N + a * N * elems)
        << name;
}

// ---- 3. FLOPs ----------------------------------------------------------------

// Forward FLOPs a token of a block (2 per multiply-add, attention 4 T C):
//   gpt2   2 (4C^2 + 2CF) + 4TC; GeluMlp(F) has Flops 4 C F = the built-in
//          MLP's; SwiGluMlp(F') 6 C F'
//   llama  2 (2C^2 + 2 C KV + 3 C F) + 4TC; SwiGluMlp(F) = its MLP; GeluMlp(F) 4 C F
double hand_block_flops(Family f, Layer l) {
  const double C = kC, T = kT;
  double attention_part, mlp;
  if (f == Family::Gpt2) {
    attention_part = 2 * (4 * C * C) + 4 * T * C;
    mlp = 2 * (2 * C * kGpt2F);
  } else {
    attention_part = 2 * (2 * C * C + 2 * C * kLlamaKV) + 4 * T * C;
    mlp = 2 * (3 * C * kLlamaF);
  }
  if (l == Layer::Gelu) mlp = 4 * C * layer_d_ff(f, l);
  if (l == Layer::SwiGlu) mlp = 6 * C * layer_d_ff(f, l);
  return attention_part + mlp;
}

TEST(CustomLayerPlan, ForwardFlopsByHand) {
  const int64_t N = 64;
  for (Family f : {Family::Gpt2, Family::Llama})
    for (Layer l : {Layer::None, Layer::Gelu, Layer::SwiGlu}) {
      const ModelSpec m = make_model(f, l);
      const std::string what = std::string(to_string(f)) + " + " + layer_label(l);
      EXPECT_DOUBLE_EQ(layer_forward_flops(m, kBlock0, N), hand_block_flops(f, l) * N) << what;
      // The pieces add up to the block; the custom piece counts the layer's Flops.
      double pieces = 0;
      for (const LayerId& p : block_pieces(m, 0)) {
        const double flops = layer_forward_flops(m, p, N);
        pieces += flops;
        if (block_piece(m, p.piece).custom >= 0) {
          EXPECT_DOUBLE_EQ(flops, (l == Layer::Gelu ? 4.0 : 6.0) * kC * layer_d_ff(f, l) * N)
              << what;
        }
      }
      EXPECT_DOUBLE_EQ(pieces, hand_block_flops(f, l) * N) << what;
      // A step: 3x forward, L blocks and the head (2 C V; the embedding and
      // the norms count nothing).
      EXPECT_DOUBLE_EQ(model_flops_per_token(m), 3 * (kL * hand_block_flops(f, l) + 2.0 * kC * kV))
          << what;
    }
  EXPECT_DOUBLE_EQ(layer_forward_flops(make_model(Family::Gpt2, Layer::Gelu), kBlock0, N),
                   layer_forward_flops(make_model(Family::Gpt2, Layer::None), kBlock0, N));
  EXPECT_DOUBLE_EQ(layer_forward_flops(make_model(Family::Llama, Layer::SwiGlu), kBlock0, N),
                   layer_forward_flops(make_model(Family::Llama, Layer::None), kBlock0, N));
}

// ---- 4. schedules ------------------------------------------------------------

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

// ---- 5. the memory plan ------------------------------------------------------

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

// ---- 6. sizes past 64-bit byte counts ----------------------------------------

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
