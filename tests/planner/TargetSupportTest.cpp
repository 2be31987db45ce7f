// Target support, the one owner of what a backend can build: each rule on a
// spec that breaks only it, every broken rule listed, and the backend named
// by the hardware. tests/emit/EmitTest.cpp checks what the commands do with it.
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/planner/Hardware.h"
#include "codegen/planner/TargetSupport.h"
#include "dsl/Frontend.h"

namespace fsdpgen {
namespace {

// A small GPT-2 both backends build, with the given additions.
Spec spec_of(const std::string& model_extra = "", const std::string& parallel = "",
             const std::string& units = "each block", int context = 32, int micro_batch = 2) {
  const std::string text = fmt::format(
      "model t {{ vocab = 256 context = {} width = 64 heads = 4 layers = 2 {} }}\n"
      "units {{ {} }}\nparallel {{ world = 2 {} }}\ntrain {{ micro_batch = {} }}\n",
      context, model_extra, units, parallel, micro_batch);
  FrontendResult r = load_spec_text("t.fsdp", text);
  EXPECT_TRUE(r.spec.has_value()) << r.diagnostics;
  return r.spec.value_or(Spec{});
}

std::vector<std::string> on_cpu(const Spec& spec) {
  return unsupported_features(spec, *find_hardware("cpu"));
}

TEST(TargetSupport, BothBackendsBuildPlainGpt2) {
  const Spec s = spec_of();
  EXPECT_EQ(on_cpu(s), std::vector<std::string>{});
  EXPECT_EQ(unsupported_features(s, *find_hardware("h100-sxm")), std::vector<std::string>{});
}

TEST(TargetSupport, EachRuleRefusesOnlyItsSpec) {
  struct Rule {
    Spec spec;
    std::string reason;
  };
  const std::vector<Rule> rules = {
      {spec_of("norm_eps = 1e-6"), "norm_eps = 1e-06 (gpt2's LayerNorm kernels use 1e-5)"},
      {spec_of("", "precision { param = bf16 reduce = fp16 }"),
       "param = bf16 with reduce = fp16 (mixing bf16 and fp16 is not supported: make reduce fp32 "
       "or the same type as param)"},
      {spec_of("", "precision { param = fp16 reduce = bf16 }"),
       "param = fp16 with reduce = bf16 (mixing bf16 and fp16 is not supported: make reduce fp32 "
       "or the same type as param)"},
      {spec_of("", "precision { param = bf16 reduce = bf16 master = bf16 }"),
       "master weights must be fp32"},
      {spec_of("", "", "unit last [final_norm] each block"),
       "final_norm and head must be in the same wrap unit"},
      {spec_of("", "precision { param = bf16 }", "each block", 33, 1),
       "activation slots would not be 4-byte aligned (odd micro_batch * context with 16-bit "
       "params)"},
  };
  for (const Rule& r : rules)
    EXPECT_EQ(on_cpu(r.spec), std::vector<std::string>{r.reason});
}

// The rules' boundaries: an odd token count is fine in fp32, and a unit of
// its own holding final_norm with an untied head is fine.
TEST(TargetSupport, OddTokensInFp32AndFinalNormWithHeadAreBuilt) {
  EXPECT_EQ(on_cpu(spec_of("", "", "each block", 33, 1)), std::vector<std::string>{});
  EXPECT_EQ(
      on_cpu(spec_of("tie_embeddings = false", "", "unit last [final_norm, head] each block")),
      std::vector<std::string>{});
}

TEST(TargetSupport, EveryBrokenRuleIsListed) {
  const Spec s =
      spec_of("norm_eps = 1e-6", "precision { param = bf16 master = bf16 }", "each block", 33, 1);
  const std::vector<std::string> reasons = on_cpu(s);
  ASSERT_EQ(reasons.size(), 3u) << fmt::format("{}", fmt::join(reasons, "\n"));
  EXPECT_TRUE(reasons[0].starts_with("norm_eps = 1e-06")) << reasons[0];
  EXPECT_EQ(reasons[1], "master weights must be fp32");
  EXPECT_TRUE(reasons[2].starts_with("activation slots")) << reasons[2];
}

// Both runtimes build llama-1b; the CUDA one refuses heads wider than its
// flash kernels take, naming the head size.
TEST(TargetSupport, LlamaBuildsOnBothUpToTheFlashHeadSize) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/llama-1b.fsdp");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_TRUE(unsupported_features(*r.spec, *find_hardware("cpu")).empty());
  EXPECT_TRUE(unsupported_features(*r.spec, *find_hardware("a100-80g")).empty());
  Spec wide = *r.spec;
  wide.model.heads = 8;  // 2048 / 8 = 256 per head: the widest the kernels take
  wide.model.kv_heads = 8;
  EXPECT_TRUE(unsupported_features(wide, *find_hardware("a100-80g")).empty());
  wide.model.heads = 4;  // 512 per head
  wide.model.kv_heads = 4;
  EXPECT_TRUE(unsupported_features(wide, *find_hardware("cpu")).empty());
  const std::vector<std::string> reasons = unsupported_features(wide, *find_hardware("a100-80g"));
  ASSERT_FALSE(reasons.empty());
  EXPECT_TRUE(
      reasons[0].starts_with("model family llama with head size 512: the CUDA "
                             "grouped-query attention kernels take heads of at most 256"))
      << reasons[0];
}

// Gemma 2's soft-caps and query_pre_attn_scalar: the CPU builds them; the
// CUDA target refuses each by name, and a query_pre_attn_scalar of the head
// size (64 / 4 = 16) changes nothing, so it is built on both.
TEST(TargetSupport, SoftCapsAndQueryScalarAreRefusedOnGpusByName) {
  const std::string llama = "family = llama ";
  const Spec attention = spec_of(llama + "attention_softcap = 50.0");
  const Spec logits = spec_of(llama + "logit_softcap = 30.0");
  const Spec scalar = spec_of(llama + "query_pre_attn_scalar = 24");
  const Spec head_size = spec_of(llama + "query_pre_attn_scalar = 16");
  const Hardware& gpu = *find_hardware("a100-80g");
  for (const Spec* s : {&attention, &logits, &scalar, &head_size})
    EXPECT_EQ(on_cpu(*s), std::vector<std::string>{});
  EXPECT_EQ(unsupported_features(attention, gpu),
            std::vector<std::string>{
                "attention_softcap on GPUs (the CPU target has it; its CUDA twin has not run "
                "on a GPU yet)"});
  EXPECT_EQ(unsupported_features(logits, gpu),
            std::vector<std::string>{
                "logit_softcap on GPUs (the CPU target has it; its CUDA twin has not run on a "
                "GPU yet)"});
  EXPECT_EQ(
      unsupported_features(scalar, gpu),
      std::vector<std::string>{"query_pre_attn_scalar = 24 (not the head size 16) on GPUs "
                               "(the CPU target has it; its CUDA twin has not run on a GPU yet)"});
  EXPECT_EQ(unsupported_features(head_size, gpu), std::vector<std::string>{});
}

// Gemma 3 1B builds on the CPU; the CUDA target lists each piece its llama
// block lacks, the sandwich norms among them.
TEST(TargetSupport, Gemma3BuildsOnTheCpuAndItsPiecesAreNamedOnGpus) {
  FrontendResult r = load_spec_file(std::string(FSDPGEN_SOURCE_DIR) + "/specs/gemma3-1b.fsdp");
  ASSERT_TRUE(r.spec) << r.diagnostics;
  EXPECT_TRUE(unsupported_features(*r.spec, *find_hardware("cpu")).empty());
  const std::vector<std::string> reasons =
      unsupported_features(*r.spec, *find_hardware("h100-sxm"));
  const std::string all = fmt::format("{}", fmt::join(reasons, "\n"));
  for (const char* piece : {"qk_norm", "sliding_window = 512", "block_norms = sandwich on GPUs",
                            "scale_embedding", "norm_plus_one", "activation"})
    EXPECT_NE(all.find(piece), std::string::npos) << piece << " in:\n" << all;
}

}  // namespace
}  // namespace fsdpgen
