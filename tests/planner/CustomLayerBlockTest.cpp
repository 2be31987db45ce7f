// CustomLayerBlockTest: a block of the planner with custom layers
// (CustomLayerPlan.h) in place of its mlp, for small gpt2 and llama models:
//   1. a block's saved bytes and the backward scratch equal sums by hand: the
//      family's rows less the replaced module's, plus the layer's arrays
//      (with flash attention and without); the scratch gains custom_out and
//      the layer's scratch;
//   2. the block's input is still found, and a model without custom layers
//      keeps its family's table, byte for byte (a regression guard);
//   3. forward FLOPs of a block and of a model, by hand.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Flops.h"
#include "dsl/Layers.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"
#include "tests/planner/CustomLayerPlan.h"

namespace fsdpgen::test {
namespace {

// ---- 1. saved bytes and backward scratch, by hand ----------------------------

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

}  // namespace
}  // namespace fsdpgen::test
