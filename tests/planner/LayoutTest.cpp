// LayoutTest: the families' layout tables (runtime/model/gpt2.h, runtime/model/llama.h),
// which the planner totals and the runtime carves: every array starts where
// its element type needs, arrays neither overlap nor leave gaps beyond that
// alignment, block tensors sit on kTensorAlignElems boundaries, and the
// planner's totals equal sizes counted by hand for small shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "codegen/planner/Activations.h"
#include "dsl/Layers.h"
#include "runtime/model/gpt2.h"
#include "runtime/model/llama.h"

namespace fsdpgen::test {
namespace {

using model::Field;
using model::Table;

struct NamedTable {
  std::string name;
  Table<Field> table;
};

const std::vector<NamedTable>& all_tables() {
  static const std::vector<NamedTable> tables = {
      {"gpt2 block", model::kGpt2BlockSaved},
      {"gpt2 final_norm", model::kGpt2FinalNormSaved},
      {"gpt2 backward scratch", model::kGpt2BackwardScratch},
      {"llama block", model::kLlamaBlockSaved},
      {"llama final_norm", model::kLlamaFinalNormSaved},
      {"llama backward scratch", model::kLlamaBackwardScratch},
  };
  return tables;
}

// Shapes with odd products (N * C, N * F), grouped-query k and v, and 3C
// above and below 2F.
const model::Dims kShapes[] = {
    {20, 80, 5, 5, 20},  // C, F, H, T, KV
    {21, 20, 3, 5, 21},
    {32, 97, 4, 8, 16},
};
const int64_t kTokens[] = {15, 16};

TEST(ModelLayout, ArraysAreAlignedDisjointAndCoverTheSlot) {
  for (const NamedTable& t : all_tables())
    for (model::Dims d : kShapes)
      for (int64_t tokens : kTokens)
        for (int64_t a : {2, 4})
          for (bool flash : {false, true}) {
            d.flash = flash;
            int64_t end = 0;
            for (size_t i = 0; i < t.table.count; ++i) {
              const Field& f = t.table[i];
              const std::string what = t.name + " " + f.name + " a=" + std::to_string(a) +
                                       " N=" + std::to_string(tokens) + (flash ? " flash" : "");
              if (!model::present(f, d)) continue;
              const int64_t e = model::elem_bytes(f.elem, a);
              const int64_t at = model::offset_bytes(t.table, i, d, tokens, a);
              EXPECT_EQ(at % e, 0) << what;
              EXPECT_GE(at, end) << what << " overlaps the array before it";
              EXPECT_LT(at - end, e) << what << " leaves more than its alignment free";
              end = at + f.per_token(d) * tokens * e;
            }
            EXPECT_EQ(end, model::slot_bytes(t.table, d, tokens, a)) << t.name;
          }
}

// Exactly one of the attention's arrays per layout: the probabilities, or
// with flash their log-sum-exp (and backward's rowsum delta).
TEST(ModelLayout, AttentionArraysFollowTheLayout) {
  for (const NamedTable& t : all_tables())
    for (size_t i = 0; i < t.table.count; ++i) {
      const std::string name = t.table[i].name;
      const model::When want = name == "probs"                    ? model::When::Materialized
                               : name == "lse" || name == "delta" ? model::When::Flash
                                                                  : model::When::Always;
      EXPECT_EQ(t.table[i].when, want) << t.name << " " << name;
    }
}

TEST(ModelLayout, UnknownArrayIsALogicError) {
  EXPECT_THROW(model::index_of(Table<Field>(model::kGpt2BlockSaved), "ln3"), std::logic_error);
  EXPECT_EQ(model::index_of(Table<Field>(model::kGpt2BlockSaved), "input"), 4u);
}

// C = 20, F = 80: ln_1 (20) at 0, its bias at 32, c_attn.weight (20 x 60 =
// 1200) at 64, its bias (60) at 1264, c_proj (400) at 1328, ...
TEST(ModelLayout, Gpt2BlockTensorsOn16ElementBoundaries) {
  const Table<model::Tensor> t = model::kGpt2BlockParams;
  const model::Dims d{20, 80, 5, 5, 20};
  const std::vector<int64_t> want = {0,    32,   64,   1264, 1328, 1728, 1760,
                                     1792, 1824, 3424, 3504, 5104, 5136};
  ASSERT_EQ(t.count + 1, want.size());
  for (size_t i = 0; i <= t.count; ++i) {
    EXPECT_EQ(model::offset_elems(t, i, d), want[i]) << i;
    EXPECT_EQ(model::offset_elems(t, i, d) % model::kTensorAlignElems, 0) << i;
  }
}

ModelSpec small_model(Family family) {
  ModelSpec m;
  m.family = family;
  m.vocab = 7;
  m.context = 5;
  m.width = 20;
  m.heads = 5;
  m.kv_heads = family == Family::Gpt2 ? 5 : 1;  // llama: k and v are 4 wide
  m.layers = 1;
  m.ffn_hidden = 80;
  return m;
}

// N = 15 tokens, C = 20, F = 80, H = 5, T = 5, by hand:
//   gpt2 block  4 fp32 statistics + a * (8C + 2F = 320) + probs a * H * T (25) or lse 4 * H (20)
//   final_norm  2 fp32 + a * 2C (40)
//   scratch     a * (2C + max(3C + H*T, 2F) = 40 + 160), with flash (40 + max(60, 160))
//               then 4 * H from the next 4-byte boundary
TEST(ModelLayout, PlannerTotalsGpt2ByHand) {
  const ModelSpec m = small_model(Family::Gpt2);
  const LayerId block{LayerId::Kind::Block, 0}, norm{LayerId::Kind::FinalNorm, 0};
  for (int64_t a : {2, 4}) {
    const ActivationShape materialized{15, a, false}, flash{15, a, true};
    EXPECT_EQ(layer_saved_bytes(m, block, materialized), 15 * (16 + a * (320 + 25)));
    EXPECT_EQ(layer_saved_bytes(m, block, flash), 15 * (16 + a * 320 + 20));
    EXPECT_EQ(layer_saved_bytes(m, norm, materialized), 15 * (8 + a * 40));
    EXPECT_EQ(layer_saved_bytes(m, norm, flash), 15 * (8 + a * 40));
    EXPECT_EQ(backward_scratch_bytes(m, materialized), 15 * a * 200);
    EXPECT_EQ(backward_scratch_bytes(m, flash), 15 * a * 200 + 15 * 20);
    EXPECT_EQ(saved_field_offset_bytes(m, block, materialized, "input"), 15 * 16);
    EXPECT_EQ(saved_field_offset_bytes(m, norm, materialized, "input"), 15 * 8);
  }
  // Odd N * C with 2-byte params: the scratch's arrays end on 2 mod 4 bytes,
  // delta starts 2 bytes later. N = 3, C = 21, F = 20: 2 * 3 * (42 + 63) = 630.
  ModelSpec odd = m;
  odd.width = 21;
  odd.heads = odd.kv_heads = 3;
  odd.ffn_hidden = 20;
  EXPECT_EQ(backward_scratch_bytes(odd, {3, 2, true}), 632 + 3 * 3 * 4);
}

// Llama, N = 15, C = 20, F = 80, H = 5, T = 5, one kv head (KV = 4):
//   block       2 fp32 rstd + a * (6C + 2KV + 3F = 368) + probs a * 25 or lse 4 * H (20)
//   final_norm  1 fp32 + a * 2C (40)
//   scratch     a * (2C + max(3C + H*T, 3F, C + 2KV) = 40 + 240), with flash then 4 * H
TEST(ModelLayout, PlannerTotalsLlamaByHand) {
  const ModelSpec m = small_model(Family::Llama);
  const LayerId block{LayerId::Kind::Block, 0}, norm{LayerId::Kind::FinalNorm, 0};
  for (int64_t a : {2, 4}) {
    const ActivationShape materialized{15, a, false}, flash{15, a, true};
    EXPECT_EQ(layer_saved_bytes(m, block, materialized), 15 * (8 + a * (368 + 25)));
    EXPECT_EQ(layer_saved_bytes(m, block, flash), 15 * (8 + 20 + a * 368));
    EXPECT_EQ(layer_saved_bytes(m, norm, flash), 15 * (4 + a * 40));
    EXPECT_EQ(backward_scratch_bytes(m, materialized), 15 * a * 280);
    EXPECT_EQ(backward_scratch_bytes(m, flash), 15 * a * 280 + 15 * 20);
  }
}

// The head's buffers, N = 15: logits V = 7 padded to Vp = 8 rows of a bytes,
// then a fp32 loss per token; inputs: 15 int32 tokens, then 15 targets.
TEST(ModelLayout, LogitsThenLossesAndTokensThenTargets) {
  ModelSpec m = small_model(Family::Gpt2);
  m.pad_vocab_to = 8;
  for (int64_t a : {2, 4}) {
    const ActivationShape shape{15, a, true};
    EXPECT_EQ(losses_offset_bytes(m, shape), 15 * 8 * a);
    EXPECT_EQ(logits_bytes(m, shape), 15 * 8 * a + 15 * 4);
  }
  EXPECT_EQ(targets_offset_bytes({15, 2, true}), 15 * 4);
  EXPECT_EQ(inputs_bytes({15, 2, true}), 2 * 15 * 4);
}

// The layers around the blocks, from the tables, against Hugging Face's names
// and shapes (V = 7, T = 5, C = 20; the vocabulary's rows are padded).
TEST(ModelLayout, EmbedFinalNormAndHeadTensorsByHand) {
  ModelSpec gpt2 = small_model(Family::Gpt2);
  gpt2.tie_embeddings = false;
  auto names = [](const std::vector<TensorDecl>& ts) {
    std::vector<std::string> out;
    for (const TensorDecl& t : ts)
      out.push_back(t.name + (t.vocab_rows ? " (vocab rows)" : "") + " " +
                    std::to_string(t.elems()));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(layer_tensors(gpt2, {LayerId::Kind::Embed, 0})),
            (V{"transformer.wte.weight (vocab rows) 140", "transformer.wpe.weight 100"}));
  EXPECT_EQ(names(layer_tensors(gpt2, {LayerId::Kind::FinalNorm, 0})),
            (V{"transformer.ln_f.weight 20", "transformer.ln_f.bias 20"}));
  EXPECT_EQ(names(layer_tensors(gpt2, {LayerId::Kind::Head, 0})),
            (V{"lm_head.weight (vocab rows) 140"}));
  EXPECT_EQ(layer_tensors(gpt2, {LayerId::Kind::Block, 3}).front().name,
            "transformer.h.3.ln_1.weight");
  ModelSpec llama = small_model(Family::Llama);
  llama.tie_embeddings = true;
  EXPECT_EQ(names(layer_tensors(llama, {LayerId::Kind::Embed, 0})),
            (V{"model.embed_tokens.weight (vocab rows) 140"}));
  EXPECT_EQ(names(layer_tensors(llama, {LayerId::Kind::FinalNorm, 0})),
            (V{"model.norm.weight 20"}));
  EXPECT_TRUE(layer_tensors(llama, {LayerId::Kind::Head, 0}).empty());  // tied
  EXPECT_EQ(layer_tensors(llama, {LayerId::Kind::Block, 2}).back().name,
            "model.layers.2.mlp.down_proj.weight");
}

TEST(ModelLayout, EmbedAndHeadSaveNothing) {
  const ModelSpec m = small_model(Family::Gpt2);
  EXPECT_EQ(layer_saved_bytes(m, {LayerId::Kind::Embed, 0}, {15, 4, false}), 0);
  EXPECT_EQ(layer_saved_bytes(m, {LayerId::Kind::Head, 0}, {15, 4, false}), 0);
}

}  // namespace
}  // namespace fsdpgen::test
