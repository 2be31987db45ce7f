// Custom layers end to end (DESIGN §9): a model whose MLP is a C++ layer read
// from a header (examples/layers) trains exactly as the built-in model with
// the same weights: GeluMlp, GPT-2's MLP written against the layer API, gives
// the built-in gpt2's losses and gradient norms bit for bit (CPU, fp32 and
// bf16) under every strategy, with recompute, accumulation and per-linear
// units; SwiGluMlp in a llama block gives the built-in llama's, bit for bit too.
// Both runs start from the same weights: the built-in binary's initial ones
// (--steps 0 --save), renamed to the custom layer's tensors.
#include <cstdint>
#include <map>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

std::string gelu_layers() {
  return example_layers("gelu_mlp.h", "mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)");
}
std::string swiglu_layers() {
  return example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = ffn_hidden)");
}

using Renames = std::map<std::string, std::string>;

// The built-in MLP's tensors under the custom layer's names.
Renames mlp_renames(const std::string& family) {
  if (family == "llama")
    return {{"mlp.gate_proj.weight", "mlp.gate_w"},
            {"mlp.up_proj.weight", "mlp.up_w"},
            {"mlp.down_proj.weight", "mlp.down_w"}};
  return {{"mlp.c_fc.weight", "mlp.fc_w"},
          {"mlp.c_fc.bias", "mlp.fc_b"},
          {"mlp.c_proj.weight", "mlp.proj_w"},
          {"mlp.c_proj.bias", "mlp.proj_b"}};
}

// A test layer's header (tests/layers/custom).
std::string test_header(const std::string& name) {
  return (fs::path(FSDPGEN_SOURCE_DIR) / "tests" / "layers" / "custom" / name).string();
}

// Copies a safetensors file with every tensor whose name ends in a key of
// `renames` renamed (its bytes unchanged); returns how many were renamed.
int rename_tensors(const fs::path& from, const fs::path& to,
                   const std::map<std::string, std::string>& renames) {
  const std::string all = file_bytes(from);
  uint64_t n = 0;
  if (all.size() < 8) return -1;
  std::memcpy(&n, all.data(), 8);
  nlohmann::json header = nlohmann::json::parse(all.substr(8, n));
  nlohmann::json out = nlohmann::json::object();
  int renamed = 0;
  for (auto& [name, value] : header.items()) {
    std::string key = name;
    for (const auto& [old_leaf, new_leaf] : renames)
      if (key.size() > old_leaf.size() &&
          key.compare(key.size() - old_leaf.size(), old_leaf.size(), old_leaf) == 0) {
        key = key.substr(0, key.size() - old_leaf.size()) + new_leaf;
        ++renamed;
      }
    out[key] = value;
  }
  std::string text = out.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t size = text.size();
  std::ofstream f(to, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&size), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  f.write(all.data() + 8 + n, static_cast<std::streamsize>(all.size() - 8 - n));
  return renamed;
}

struct Pair {
  std::vector<nlohmann::json> builtin, custom;
};

// Trains c with the built-in module and with `layers` in its place, both
// from the built-in binary's initial weights.
Pair train_both(const std::string& name, E2eConfig c, const std::string& layers,
                const Renames& renames) {
  const fs::path dir = e2e_dir("custom_" + name);
  fs::create_directories(dir / "builtin");
  fs::create_directories(dir / "custom");
  E2eConfig builtin = c;
  builtin.layers = "";
  // Under each linear the custom MLP is one unit with the norm before it;
  // the built-in model gets the same units (the same flat parameters, so the
  // same reductions in the same order).
  if (c.units == "each linear")
    builtin.units =
        "unit [block 0.ln_2, block 0.mlp]\n  unit [block 1.ln_2, block 1.mlp]\n"
        "  unit [block 2.ln_2, block 2.mlp]\n  each linear";
  c.layers = layers;
  const fs::path b = build_binary(dir / "builtin", builtin.spec());
  const fs::path u = build_binary(dir / "custom", c.spec());
  CmdResult r = run_binary(c.world, b, "--steps 0 --save init.safetensors");
  EXPECT_EQ(r.status, 0) << r.out;
  const int renamed = rename_tensors(dir / "builtin" / "init.safetensors",
                                     dir / "custom" / "init.safetensors", renames);
  EXPECT_EQ(renamed, 3 * static_cast<int>(renames.size()));  // 3 blocks
  const std::string init = "--init-from init.safetensors";
  return {run_metrics(c, b, "metrics.jsonl", init), run_metrics(c, u, "metrics.jsonl", init)};
}

struct Tolerance {
  double loss = 0, grad_norm = 0;  // relative; 0: bit for bit
};

// Every step's loss and gradient norm, printed; each within `tolerance`;
// the first step's loss (the same forward from the same weights) bit for
// bit; the loss must move.
void expect_same_steps(const Pair& p, int steps, Tolerance tolerance) {
  ASSERT_EQ(p.builtin.size(), static_cast<size_t>(steps));
  ASSERT_EQ(p.custom.size(), static_cast<size_t>(steps));
  for (size_t s = 0; s < p.builtin.size(); ++s)
    for (const char* key : {"loss", "grad_norm"}) {
      const double want = p.builtin[s].at(key).get<double>();
      const double got = p.custom[s].at(key).get<double>();
      const double rel = std::abs(got - want) / std::abs(want);
      std::printf("step %zu %s: built-in %.9g, custom %.9g, relative %.2e\n", s + 1, key, want, got,
                  rel);
      const double limit = std::string(key) == "loss" ? tolerance.loss : tolerance.grad_norm;
      if (limit == 0 || (s == 0 && std::string(key) == "loss"))
        EXPECT_EQ(got, want) << key << " of step " << s + 1;
      else
        EXPECT_LE(rel, limit) << key << " of step " << s + 1;
    }
  const double first = p.builtin.front().at("loss").get<double>();
  const double last = p.builtin.back().at("loss").get<double>();
  EXPECT_GT(std::abs(last - first) / first, 1e-3) << "the loss should move";
}

class GeluMlpEqualsBuiltin : public ::testing::TestWithParam<E2eConfig> {};

// GeluMlp runs the built-in MLP's kernels in the same order on the same
// flat layout, so nothing may differ: bit for bit.
TEST_P(GeluMlpEqualsBuiltin, StepForStep) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const E2eConfig& c = GetParam();
  expect_same_steps(train_both(c.name(), c, gelu_layers(), mlp_renames("gpt2")), c.steps, {});
}

std::vector<E2eConfig> gelu_configs() {
  std::vector<E2eConfig> out;
  E2eConfig c;  // full_shard on 2 ranks
  out.push_back(c);
  c.sharding = "shard_grad_op";
  c.recompute = "block";
  out.push_back(c);
  c = {};
  c.sharding = "no_shard";
  c.micro_batches = 4;
  out.push_back(c);
  c = {};
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batches = 2;
  c.reduce = "last";
  out.push_back(c);
  c = {};
  c.sharding = "hybrid_shard_zero2";
  c.world = 4;
  c.shard_group = 2;
  c.recompute = "block";
  out.push_back(c);
  c = {};  // the custom MLP its own unit, recomputed and brought back from the host
  c.units = "each linear";
  c.recompute = "block";
  c.offload_activations = true;
  out.push_back(c);
  c = {};
  c.world = 1;
  c.param = "bf16";
  c.units = "unit [block 0.mlp, block 1]";
  c.micro_batches = 2;
  out.push_back(c);
  for (E2eConfig& x : out)
    x.layers = gelu_layers();
  return out;
}

INSTANTIATE_TEST_SUITE_P(Strategies, GeluMlpEqualsBuiltin, ::testing::ValuesIn(gelu_configs()),
                         [](const auto& info) { return info.param.name(); });

// llama's built-in MLP is SwiGLU too, written with its own calls (the down
// projection adds the residual as it writes): the same GEMMs and rounding,
// so bit for bit as well (measured).
TEST(SwiGluMlp, EqualsBuiltinLlama) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.family = "llama";
  c.recompute = "block";
  c.micro_batches = 2;
  expect_same_steps(train_both("llama_swiglu", c, swiglu_layers(), mlp_renames("llama")), c.steps,
                    {});
}

// Under optimizer = muon(...) the examples' matrices are Muon's as the
// built-in MLP's are (their headers say "muon(in, out)" for GeluMlp's
// Conv1D-like weights, "muon(out, in)" for SwiGluMlp's nn.Linear ones): the
// same matrices at the same places, the same owners and learning rates, so
// bit for bit again; an orientation written the other way round changes
// GeluMlp's lr (sqrt(4) for one of its two matrices) and fails it.
TEST(CustomLayerMuon, GeluMlpEqualsBuiltinGpt2) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.optimizer = "muon(lr = 0.02, weight_decay = 0.01, adamw = adamw(lr = 1e-2))";
  expect_same_steps(train_both("muon_gelu", c, gelu_layers(), mlp_renames("gpt2")), c.steps, {});
}

TEST(CustomLayerMuon, SwiGluMlpEqualsBuiltinLlamaHybrid) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.family = "llama";
  c.optimizer = "muon(lr = 0.02, adjust_lr = match_rms_adamw, adamw = adamw(lr = 1e-2))";
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batch = 1;
  expect_same_steps(train_both("muon_swiglu", c, swiglu_layers(), mlp_renames("llama")), c.steps,
                    {});
}

// Every module of a gpt2 block custom (test layers reimplementing LayerNorm
// and the attention module, and GeluMlp), from three headers: the built-in
// model's steps within the e2e tests' fp32 tolerances (EquivalenceTest:
// loss 2.5e-6, gradient norm 4e-5 relative), the first step's loss bit for
// bit. Not all bit for bit: the built-in norms' backward adds d(input) to
// the residual stream's gradient inside the kernel, where the compiler fuses
// that add into a multiply-add; a custom norm's d(input) is rounded to fp32
// first, then added, and AdamW's normalized updates carry the last-bit
// differences on (measured: loss 0 to 2.5e-7, gradient norm 0 to 1.9e-6).
constexpr Tolerance kNormTolerance = {2.5e-6, 4e-5};
class WholeCustomBlock : public ::testing::TestWithParam<E2eConfig> {};

TEST_P(WholeCustomBlock, EqualsTheBuiltinBlock) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const E2eConfig& c = GetParam();
  const std::string layers = fmt::format(
      "  import = [\"{}\", \"{}\", \"{}/examples/layers/gelu_mlp.h\"]\n"
      "  ln_1 = LayerNorm(d_model = width)\n"
      "  attn = CausalSelfAttention(d_model = width, heads = heads, context = context)\n"
      "  ln_2 = LayerNorm(d_model = width)\n"
      "  mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)\n",
      test_header("layer_norm.h"), test_header("causal_attention.h"), FSDPGEN_SOURCE_DIR);
  Renames renames = mlp_renames("gpt2");
  renames.insert({{"ln_1.weight", "ln_1.w"},
                  {"ln_1.bias", "ln_1.b"},
                  {"ln_2.weight", "ln_2.w"},
                  {"ln_2.bias", "ln_2.b"},
                  {"attn.c_attn.weight", "attn.qkv_w"},
                  {"attn.c_attn.bias", "attn.qkv_b"},
                  {"attn.c_proj.weight", "attn.proj_w"},
                  {"attn.c_proj.bias", "attn.proj_b"}});
  expect_same_steps(train_both("whole_" + c.name(), c, layers, renames), c.steps, kNormTolerance);
}

// The attention module alone (a residual branch whose output is a saved
// row, not the block's): bit for bit, recomputed under per-linear units.
TEST(CustomAttention, EqualsTheBuiltinAttention) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.recompute = "block";
  c.units = "unit [block 1.attn] unit [block 2.ln_1, block 2.attn]";
  const std::string layers = fmt::format(
      "  import = \"{}\"\n"
      "  attn = CausalSelfAttention(d_model = width, heads = heads, context = context)\n",
      test_header("causal_attention.h"));
  const Renames renames = {{"attn.c_attn.weight", "attn.qkv_w"},
                           {"attn.c_attn.bias", "attn.qkv_b"},
                           {"attn.c_proj.weight", "attn.proj_w"},
                           {"attn.c_proj.bias", "attn.proj_b"}};
  expect_same_steps(train_both("attention", c, layers, renames), c.steps, {});
}

// llama's attention replaced (here by GPT-2's, without rotary positions):
// the module's glue in the other family (its output row res2, its d(input)
// for the RMSNorm before it) shards like any layer: two ranks with
// per-linear units and recompute equal the single-rank run within the e2e
// tests' fp32 tolerance (2.5e-6), and the loss moves.
TEST(CustomAttention, InALlamaBlockShardsLikeAnyLayer) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const std::string layers = fmt::format(
      "  import = \"{}\"\n"
      "  self_attn = CausalSelfAttention(d_model = width, heads = heads, context = context)\n",
      test_header("causal_attention.h"));
  auto metrics = [&](const std::string& name, E2eConfig c) {
    c.family = "llama";
    c.layers = layers;
    return train_losses("custom_llama_attention_" + name, c);
  };
  E2eConfig single;
  single.world = 1;
  single.sharding = "no_shard";
  single.micro_batch = 4;
  E2eConfig sharded;
  sharded.units = "each linear";
  sharded.recompute = "block";
  const std::vector<double> a = metrics("single", single), b = metrics("sharded", sharded);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    std::printf("step %zu loss: single rank %.9g, 2 ranks %.9g, relative %.2e\n", i + 1, a[i], b[i],
                std::abs(b[i] - a[i]) / a[i]);
    EXPECT_LE(std::abs(b[i] - a[i]) / a[i], 2.5e-6) << "step " << i + 1;
  }
  EXPECT_GT(std::abs(a.back() - a.front()) / a.front(), 1e-3) << "the loss should move";
}

std::vector<E2eConfig> whole_block_configs() {
  std::vector<E2eConfig> out;
  E2eConfig c;
  c.recompute = "block";
  out.push_back(c);
  c = {};
  c.sharding = "hybrid_shard_zero2";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batches = 2;
  out.push_back(c);
  c = {};  // each module its own unit (the norms join the module after them)
  c.sharding = "shard_grad_op";
  c.units = "unit [block 0.attn] unit [block 1.ln_2, block 1.mlp]";
  c.recompute = "block";
  out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Gpt2, WholeCustomBlock, ::testing::ValuesIn(whole_block_configs()),
                         [](const auto& info) { return info.param.name(); });

// llama's norms as custom RMSNorms and its MLP as SwiGluMlp: within
// kNormTolerance, for the same reason.
TEST(CustomNorms, EqualBuiltinLlama) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  E2eConfig c;
  c.family = "llama";
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.recompute = "block";
  const std::string layers = fmt::format(
      "  import = [\"{}\", \"{}/examples/layers/swiglu_mlp.h\"]\n"
      "  input_layernorm = RmsNorm(d_model = width)\n"
      "  post_attention_layernorm = RmsNorm(d_model = width)\n"
      "  mlp = SwiGluMlp(d_model = width, d_ff = ffn_hidden)\n",
      test_header("rms_norm.h"), FSDPGEN_SOURCE_DIR);
  Renames renames = mlp_renames("llama");
  renames.insert({{"input_layernorm.weight", "input_layernorm.w"},
                  {"post_attention_layernorm.weight", "post_attention_layernorm.w"}});
  expect_same_steps(train_both("llama_norms", c, layers, renames), c.steps, kNormTolerance);
}

// An added layer (after_mlp: the example Adapter, its up projection zero at
// start) leaves the first step's loss as the built-in model's, bit for bit
// (both initialized by name from the same seed), then trains: the later
// steps differ. Sharded with per-linear units and recompute, it equals the
// single-rank run within the e2e tests' fp32 tolerance (2.5e-6).
TEST(AddedLayer, StartsAsTheModelWithoutItAndShardsLikeAnyLayer) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const std::string adapter =
      example_layers("adapter.h", "after_mlp = Adapter(d_model = width, rank = 8)");
  auto losses = [](const std::string& name, const E2eConfig& c) {
    return train_losses("custom_added_" + name, c);
  };
  E2eConfig plain;
  plain.world = 1;
  plain.sharding = "no_shard";
  plain.micro_batch = 4;
  E2eConfig single = plain;
  single.layers = adapter;
  E2eConfig sharded;
  sharded.layers = adapter;
  sharded.units = "each linear";
  sharded.recompute = "block";
  const std::vector<double> a = losses("plain", plain), b = losses("single", single),
                            s = losses("sharded", sharded);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(b[0], a[0]) << "the adapter starts as the identity";
  std::printf("step 4 loss: without the adapter %.9g, with it %.9g\n", a[3], b[3]);
  EXPECT_NE(b[3], a[3]) << "the adapter trains";
  for (size_t i = 0; i < 4; ++i) {
    const double want = b[i], got = s[i];
    std::printf("step %zu loss: single rank %.9g, 2 ranks per-linear %.9g, relative %.2e\n", i + 1,
                want, got, std::abs(got - want) / want);
    EXPECT_LE(std::abs(got - want) / want, 2.5e-6) << "step " << i + 1;
  }
}

// --target cuda with a layer that has no CUDA entry points stops at
// generation time naming the layer and what it lacks.
TEST(CustomLayer, CudaTargetNeedsTheLayersCudaEntryPoints) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("custom_cuda_refused");
  E2eConfig c;
  c.layers = gelu_layers();
  std::ofstream(dir / "e2e.fsdp") << c.spec();
  CmdResult r = run_command(
      fmt::format("cd {} && {} e2e.fsdp -o train --target cuda 2>&1", dir.string(), FSDPGEN_BIN));
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("custom layer GeluMlp"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("forward_cuda and backward_cuda"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir / "train"));
}

// A layer whose C++ does not compile is the user's error, said as such.
TEST(CustomLayer, ALayerThatDoesNotCompileIsTheUsersError) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("custom_compile_error");
  // GeluMlp with a misspelt kernel in forward: the reader reads declarations
  // only, the compiler of the generated program finds it.
  std::string header =
      file_bytes(fs::path(FSDPGEN_SOURCE_DIR) / "examples" / "layers" / "gelu_mlp.h");
  const std::string call = "gelu_forward(act.data";
  ASSERT_NE(header.find(call), std::string::npos);
  header.replace(header.find(call), call.size(), "gelu_forwrd(act.data");
  std::ofstream(dir / "broken_mlp.h") << header;
  E2eConfig c;
  c.layers = "  import = \"broken_mlp.h\"\n  mlp = GeluMlp(d_model = width, d_ff = ffn_hidden)\n";
  std::ofstream(dir / "e2e.fsdp") << c.spec();
  CmdResult r =
      run_command(fmt::format("cd {} && {} e2e.fsdp -o train 2>&1", dir.string(), FSDPGEN_BIN));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("gelu_forwrd"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("error: compiling the generated program with the custom layers of"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

// The example spec trains: SwiGLU in a gpt2 block, 2 ranks.
TEST(CustomLayer, TheSwiGluExampleTrains) {
  FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const fs::path dir = e2e_dir("custom_swiglu_example");
  CmdResult r = run_command(fmt::format("cd {} && {} examples/layers/gpt2-swiglu.fsdp -o {} 2>&1",
                                        FSDPGEN_SOURCE_DIR, FSDPGEN_BIN, (dir / "train").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run_binary(2, dir / "train", "--steps 30 --metrics metrics.jsonl");
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<double> losses = read_losses(dir / "metrics.jsonl");
  ASSERT_EQ(losses.size(), 30u);
  std::printf("loss %.4f -> %.4f in 30 steps\n", losses.front(), losses.back());
  EXPECT_LT(losses.back(), losses.front() - 1.0) << r.out;
}

}  // namespace
}  // namespace fsdpgen::test
