// Wrap-unit resolution: policies, explicit lists, the root, tied weights, and
// the runs of blocks that name units and print their layer lists.
#include <gtest/gtest.h>

#include "dsl/Layers.h"
#include "dsl/Print.h"
#include "dsl/Units.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

// "root:embed,final_norm,head | block0:block 0 | ..."
std::string describe(const UnitsSpec& u) {
  std::string out;
  for (const UnitSpec& x : u.units) {
    if (!out.empty()) out += " | ";
    out += x.name + ":";
    for (size_t i = 0; i < x.layers.size(); ++i)
      out += (i ? "," : "") + to_string(x.layers[i]);
  }
  return out;
}

std::string units_of(const std::string& units, const std::string& model_extra = "") {
  return describe(load_ok(with_model("units { " + units + " }", model_extra)).units);
}

// The parameters of every unit, summed.
int64_t params_in_units(const Spec& s) {
  int64_t params = 0;
  for (const UnitSpec& u : s.units.units)
    for (const LayerId& l : u.layers)
      params += layer_params(s.model, l);
  return params;
}

// Block 0's units as describe() writes them, for a policy over every block.
std::string block0_units(const std::string& units) {
  const std::string all = units_of(units);
  return all.substr(0, all.find(" | block1"));
}

TEST(Units, EachBlock) {
  EXPECT_EQ(units_of("each block"),
            "root:embed,final_norm,head | block0:block 0 | block1:block 1 | block2:block 2 | "
            "block3:block 3");
}

TEST(Units, EmptySectionMeansEachBlock) {
  EXPECT_EQ(units_of(""), units_of("each block"));
}

TEST(Units, GroupLeavesASmallerLastGroup) {
  EXPECT_EQ(units_of("group 3 blocks"),
            "root:embed,final_norm,head | blocks0_2:block 0,block 1,block 2 | block3:block 3");
}

TEST(Units, MinParamsGroupsUntilTheThreshold) {
  // A block of width 64 has 12*64*64 + 13*64 = 49984 parameters.
  EXPECT_EQ(units_of("min_params 50K"),
            "root:embed,final_norm,head | blocks0_1:block 0,block 1 | blocks2_3:block 2,block 3");
  EXPECT_EQ(units_of("min_params 1"), units_of("each block"));
}

TEST(Units, ExplicitListsAndTheRoot) {
  EXPECT_EQ(units_of("unit first [block 0..1]"),
            "root:embed,block 2,block 3,final_norm,head | first:block 0,block 1");
  EXPECT_EQ(units_of("unit first [block 0..1] each block"),
            "root:embed,final_norm,head | first:block 0,block 1 | block2:block 2 | block3:block 3");
}

TEST(Units, UntiedHeadMayHaveItsOwnUnit) {
  EXPECT_EQ(units_of("unit out [final_norm, head] each block", "tie_embeddings = false"),
            "root:embed | block0:block 0 | block1:block 1 | block2:block 2 | block3:block 3 | "
            "out:final_norm,head");
}

TEST(Units, TiedEmbeddingAndHeadMoveToTheRoot) {
  FrontendResult r =
      load_spec_text("t.fsdp", with_model("units { unit out [final_norm, head] each block }"));
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_NE(
      r.diagnostics.find("warning: tied token embedding and LM head are placed in different units"),
      std::string::npos);
  EXPECT_EQ(describe(r.spec->units),
            "root:embed,head | block0:block 0 | block1:block 1 | block2:block 2 | block3:block 3 | "
            "out:final_norm");
}

TEST(Units, EveryLayerIsInExactlyOneUnit) {
  for (const char* units :
       {"each block", "group 2", "min_params 120K", "unit a [embed, block 0] group 2",
        "unit z [block 3] unit y [block 1..2]"}) {
    Spec s = load_ok(with_model(std::string("units { ") + units + " }", "tie_embeddings = false"));
    std::vector<int> seen(s.model.layers + 3, 0);
    for (const UnitSpec& u : s.units.units)
      for (const LayerId& l : u.layers)
        ++seen[l.order(s.model.layers)];
    for (int n : seen)
      EXPECT_EQ(n, 1) << units;
    EXPECT_EQ(params_in_units(s), model_params(s.model)) << units;
  }
}

TEST(Units, LayerRunsGroupConsecutiveBlocks) {
  using K = LayerId::Kind;
  const LayerId embed{K::Embed, 0}, norm{K::FinalNorm, 0}, head{K::Head, 0};
  auto block = [](int64_t b) { return LayerId{K::Block, b}; };
  EXPECT_EQ(
      layer_runs({embed, block(0), block(1), block(2), block(5), norm, head}),
      (std::vector<LayerRun>{{embed, 0}, {block(0), 2}, {block(5), 5}, {norm, 0}, {head, 0}}));
  EXPECT_EQ(layer_runs({block(3)}), (std::vector<LayerRun>{{block(3), 3}}));
  EXPECT_EQ(layer_runs({block(1), block(3), block(4)}),
            (std::vector<LayerRun>{{block(1), 1}, {block(3), 4}}));
  EXPECT_TRUE(layer_runs({}).empty());
}

// The runs name automatic units: a policy's runs and explicit units without a name.
TEST(Units, AutomaticNamesSpellTheRuns) {
  EXPECT_EQ(auto_unit_name(ModelSpec{}, {{LayerId::Kind::Block, 3}}), "block3");
  EXPECT_EQ(units_of("unit [embed, block 0..1] group 2", "tie_embeddings = false"),
            "root:final_norm,head | embed_blocks0_1:embed,block 0,block 1 | "
            "blocks2_3:block 2,block 3");
}

// Sub-block units: each linear cuts a block into its linear modules, a norm
// joining the linear after it; explicit pieces split a block, whose other
// pieces become units of their own (never the root); every parameter is in
// exactly one unit.
TEST(Units, EachLinearWrapsEveryLinearModule) {
  EXPECT_EQ(block0_units("each linear"),
            "root:embed,final_norm,head | block0_ln_1_attn_c_attn:block 0 piece 0,block 0 piece 1 "
            "| block0_attn_c_proj:block 0 piece 2 | block0_ln_2_mlp_c_fc:block 0 piece 3,block 0 "
            "piece 4 | block0_mlp_c_proj:block 0 piece 5");
}

// Under each linear, a norm whose next linear an explicit unit holds joins
// the linear before it rather than standing alone.
TEST(Units, EachLinearKeepsNoNormAlone) {
  EXPECT_EQ(block0_units("unit m [block 0.mlp] each linear"),
            "root:embed,final_norm,head | block0_ln_1_attn_c_attn:block 0 piece 0,block 0 piece 1 "
            "| block0_attn_c_proj_ln_2:block 0 piece 2,block 0 piece 3 | m:block 0 piece 4,block 0 "
            "piece 5");
}

TEST(Units, ExplicitPiecesSplitABlockAndTheRestIsWrapped) {
  EXPECT_EQ(units_of("unit a [block 0, block 1.ln_1, block 1.attn] unit m [block 3.mlp]"),
            "root:embed,block 2,final_norm,head | a:block 0,block 1 piece 0,block 1 piece 1,block "
            "1 piece 2 | block1_ln_2_mlp_c_fc_mlp_c_proj:block 1 piece 3,block 1 piece 4,block 1 "
            "piece 5 | block3_ln_1_attn_c_attn_attn_c_proj_ln_2:block 3 piece 0,block 3 piece "
            "1,block 3 piece 2,block 3 piece 3 | m:block 3 piece 4,block 3 piece 5");
  for (const char* units : {"each linear", "unit a [block 0.attn] group 2",
                            "unit [block 1.mlp.c_fc] min_params 100K"}) {
    Spec s = load_ok(with_model(std::string("units { ") + units + " }", "tie_embeddings = false"));
    EXPECT_EQ(params_in_units(s), model_params(s.model)) << units;
  }
}

// The runs print the layer lists of `fsdpgen check --dump`, gaps included.
TEST(Units, PrintedLayerListsSpellTheRuns) {
  std::string printed = print_spec(load_ok(with_model("units { unit mid [block 1..2] }")));
  EXPECT_NE(printed.find("  unit mid [block 1..2]\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("root: [embed, block 0, block 3, final_norm, head], "), std::string::npos)
      << printed;
}

}  // namespace
}  // namespace fsdpgen::test
