// Round trip: printing a Spec and checking the text gives an equal Spec, and
// printing is a fixed point, for every example spec and every variant below.
#include <gtest/gtest.h>

#include "dsl/Print.h"
#include "tests/common/TestName.h"
#include "tests/dsl/TestUtil.h"

namespace fsdpgen::test {
namespace {

void expect_round_trip(const std::string& name, const std::string& text) {
  FrontendResult first = load_spec_text(name, text);
  ASSERT_TRUE(first.spec) << first.diagnostics;
  std::string printed = print_spec(*first.spec);
  FrontendResult second = load_spec_text(name + " (printed)", printed);
  ASSERT_TRUE(second.spec) << second.diagnostics << "\n" << printed;
  EXPECT_TRUE(*first.spec == *second.spec) << name << " printed as:\n" << printed;
  EXPECT_EQ(print_spec(*second.spec), printed) << name;
  EXPECT_EQ(second.diagnostics, "") << name;
}

class RoundTrip : public testing::TestWithParam<std::filesystem::path> {};

TEST_P(RoundTrip, PrintParseIsIdentity) {
  expect_round_trip(GetParam().string(), read_text(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Specs, RoundTrip, testing::ValuesIn(files_in("specs", ".fsdp")),
                         [](const auto& info) { return test_name_of(info.param.stem().string()); });

TEST(RoundTrip, Variants) {
  const char* variants[] = {
      "units { group 2 blocks } parallel { world = 4 sharding = hybrid_shard_zero2 shard_group = 2 "
      "}",
      "units { min_params 100K } parallel { world = 2 sharding = no_shard recompute = block }",
      "units { unit a [embed, block 0] unit b [block 1..2] } parallel { offload = cpu }",
      "units { unit tail [block 3, final_norm] each block }",
      "units { each linear } parallel { recompute = block offload { params = cpu activations = "
      "cpu } }",
      "units { unit a [block 0, block 1.ln_1, block 1.attn] unit b [block 2.mlp.c_fc] }",
      "units { unit m [block 0.mlp, block 1.ln_1] group 2 blocks }",
      "train { optimizer = sgd(lr = 0.5) lr_schedule = constant(warmup = 3) clip = none data = "
      "text(\"in \\\"q\\\".txt\") }",
      "train { optimizer = adamw lr_schedule = linear(min = 1e-7) checkpoint(every = 5, keep = 1) "
      "steps = 10 }",
      "parallel { precision { param = bf16 reduce = bf16 master = fp32 } prefetch { forward = "
      "false backward = none "
      "max_inflight = 1 } accumulate { micro_batches = 8 reduce = last } }",
      "parallel { precision { param = fp16 reduce = fp32 master = fp32 } }",
      "parallel { precision { param = fp16 reduce = fp16 master = fp32 loss_scale = static(128) "
      "} }",
      "parallel { precision { param = fp32 reduce = fp16 master = fp32 loss_scale = dynamic(init "
      "= 1024, interval = 50) } }",
      "train { optimizer = muon }",
      "train { optimizer = muon(lr = 0.05, momentum = 0.9, nesterov = false, ns_steps = 0, "
      "ns_dtype = bf16, weight_decay = 0.01, adjust_lr = match_rms_adamw, adamw = adamw(lr = "
      "1e-3, betas = (0.8, 0.99), eps = 1e-6, weight_decay = 0)) }",
  };
  for (const char* v : variants)
    expect_round_trip(v, with_model(v, "tie_embeddings = false"));
  expect_round_trip(
      "llama",
      "model l { family = llama vocab = 1000 context = 64 width = 96 heads = 6 kv_heads = 2 "
      "layers = 2 rope_theta = 5e5 norm_eps = 1e-6 tie_embeddings = true }");
  expect_round_trip(
      "llama3 rope scaling",
      "model l { family = llama vocab = 1000 context = 64 width = 96 heads = 6 kv_heads = 2 "
      "layers = 2 rope_theta = 5e5 rope_scaling = llama3(factor = 32, low_freq = 1, high_freq = "
      "4, original_context = 8192) }");
  expect_round_trip(
      "linear rope scaling (Gemma 3 4B's)",
      "model l { family = llama vocab = 1000 context = 64 width = 96 heads = 6 kv_heads = 2 "
      "layers = 2 rope_theta = 1e6 rope_scaling = linear(factor = 8) }");
  expect_round_trip("qwen2 q, k and v biases",
                    "model q { family = llama vocab = 1000 context = 64 width = 96 heads = 6 "
                    "kv_heads = 2 layers = 2 qkv_bias = true tie_embeddings = true }");
  expect_round_trip("qwen3 qk-norm and a head size apart from width / heads",
                    "model q { family = llama vocab = 1000 context = 64 width = 96 heads = 5 "
                    "kv_heads = 1 layers = 2 qk_norm = true head_dim = 32 }");
  expect_round_trip("mistral's sliding window shorter than the context",
                    "model m { family = llama vocab = 1000 context = 64 width = 96 heads = 6 "
                    "kv_heads = 2 layers = 2 sliding_window = 16 }");
  expect_round_trip("olmo 2's post norms and qk-norm across heads",
                    "model o { family = llama vocab = 1000 context = 64 width = 96 heads = 6 "
                    "layers = 2 qk_norm = across_heads block_norms = post norm_eps = 1e-06 "
                    "tie_embeddings = false }");
  expect_round_trip("gemma's embedding scale, (1 + weight) norms and GeGLU",
                    "model g { family = llama vocab = 1000 context = 64 width = 96 heads = 3 "
                    "kv_heads = 1 layers = 2 head_dim = 32 scale_embedding = true "
                    "norm_plus_one = true activation = gelu_tanh tie_embeddings = true }");
  expect_round_trip("gemma 3's sandwich norms, q/k norms, alternating layers and local base",
                    "model g { family = llama vocab = 1000 context = 64 width = 96 heads = 3 "
                    "kv_heads = 1 layers = 6 head_dim = 32 qk_norm = true block_norms = sandwich "
                    "sliding_window = 16 global_every = 3 rope_local_theta = 10000 "
                    "rope_theta = 1000000 scale_embedding = true norm_plus_one = true "
                    "activation = gelu_tanh tie_embeddings = true }");
  expect_round_trip("a GeGLU llama",
                    "model g { family = llama vocab = 1000 context = 64 width = 96 heads = 6 "
                    "kv_heads = 2 layers = 2 activation = gelu_tanh }");
  expect_round_trip("gemma 2's soft-caps and query_pre_attn_scalar",
                    "model g { family = llama vocab = 1000 context = 64 width = 96 heads = 6 "
                    "layers = 2 attention_softcap = 50.0 logit_softcap = 30.5 "
                    "query_pre_attn_scalar = 24 }");
}

}  // namespace
}  // namespace fsdpgen::test
