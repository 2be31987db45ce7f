// CustomLayerPlan: what the tests of the planner with custom layers
// (CustomLayerBlockTest, CustomLayerScheduleTest) share: custom layers (DESIGN
// §9) in place of the family module "mlp" of every block, built without Clang
// from the example layers' checked-in reader output (tests/layers/golden:
// GeluMlp and SwiGluMlp) and bound with dsl/CustomLayers' bind_custom_layer,
// for small gpt2 and llama models; and the backward scratch by hand. Every
// expectation is written from the dimensions, not by the function under test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "dsl/CustomLayers.h"
#include "dsl/Frontend.h"
#include "dsl/Units.h"
#include "dsl/layer_reader/LayerDecl.h"

namespace fsdpgen::test {

namespace fs = std::filesystem;

enum class Layer { None, Gelu, SwiGlu };

inline std::string layer_label(Layer l) {
  return l == Layer::None ? "built-in" : l == Layer::Gelu ? "GeluMlp" : "SwiGluMlp";
}

inline const layers::LayerDecl& golden_decl(Layer l) {
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

inline std::string spec_text(const Knobs& k) {
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
inline int64_t layer_d_ff(Family f, Layer l) {
  if (f == Family::Gpt2) return l == Layer::SwiGlu ? 344 : kGpt2F;
  return kLlamaF;
}

// The checked spec of `k` with `layer` in place of every block's mlp, its
// units resolved again for the model with the layer.
inline Spec make_spec(const Knobs& k, Layer layer) {
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

inline ModelSpec make_model(Family f, Layer layer) {
  Knobs k;
  k.family = f;
  return make_spec(k, layer).model;
}

// Elements per token the layer saves and its scratch (the goldens' extents).
inline int64_t layer_saved_elems(Family f, Layer l) {
  if (l == Layer::None) return 0;
  const int64_t F = layer_d_ff(f, l);
  return l == Layer::Gelu ? 2 * F : 3 * F;  // pre, act / gate, up, hidden
}
inline int64_t layer_scratch_elems(Family f, Layer l) {
  if (l == Layer::None) return 0;
  const int64_t F = layer_d_ff(f, l);
  return l == Layer::Gelu ? F : 2 * F;  // dact / dgate_up
}

// The backward scratch: dres and dtmp (2C) and the largest intermediate
// gradient (gpt2: max(3C + H*T, 2F); llama: max(3C + H*T, 3F, C + 2KV)), with
// flash a fp32 delta per head; a custom layer adds custom_out (C) and its scratch.
inline int64_t hand_scratch_bytes(Family f, Layer l, int64_t N, int64_t a, bool flash) {
  const int64_t probs = flash ? 0 : kH * kT;
  const int64_t big = f == Family::Gpt2
                          ? std::max(3 * kC + probs, 2 * kGpt2F)
                          : std::max({3 * kC + probs, 3 * kLlamaF, kC + 2 * kLlamaKV});
  int64_t bytes = a * N * (2 * kC + big) + (flash ? 4 * kH * N : 0);
  if (l != Layer::None) bytes += a * N * (kC + layer_scratch_elems(f, l));
  return bytes;
}

inline const LayerId kBlock0{LayerId::Kind::Block, 0};

}  // namespace fsdpgen::test
