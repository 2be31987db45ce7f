// CudaTrainingTest: generated CUDA binaries training on a GPU (each test
// skips, saying why, without one): every strategy at world 1 and, with the
// comm layer's MPI test mode (ranks sharing one GPU), at worlds 2 and 4, and
// offload (the optimizer on the host) at worlds 1, 2 and 4, gives per-step
// losses equal to the CPU binary's for the same spec, data and initial
// weights; so do llama, custom layers and a padded vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "tests/cuda/CudaE2e.h"

namespace fsdpgen::test {
namespace {

TEST_P(CudaTraining, LossesEqualTheCpuBinarys) {
  const E2eConfig c = GetParam();
  if (!c.layers.empty()) FSDPGEN_SKIP_WITHOUT_LAYER_READER();
  const std::string name = "cuda_" + c.name();
  std::vector<double> cpu = train_losses("cpu_" + c.name(), c);
  std::vector<double> gpu = cuda_losses(name, c);
  ASSERT_EQ(cpu.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], loss_tolerance(c)) << "step " << i + 1;
    worst = std::max(worst, std::abs(gpu[i] - cpu[i]));
  }
  std::printf("[ measured ] %s: max |cuda - cpu| loss %.3g (tolerance %.0e)\n", c.name().c_str(),
              worst, loss_tolerance(c));
}

std::vector<E2eConfig> training_configs() {
  std::vector<E2eConfig> out;
  auto add = [&](std::string sharding, int world, int shard_group, std::string param) {
    E2eConfig c;
    c.sharding = std::move(sharding);
    c.world = world;
    c.shard_group = shard_group;
    c.param = param;
    c.reduce_dtype = param;
    out.push_back(c);
  };
  for (std::string p : {"fp32", "bf16"}) {
    for (std::string s : {"full_shard", "shard_grad_op", "no_shard"})
      for (int w : {1, 2})
        add(s, w, 0, p);
    for (std::string s : {"hybrid_shard", "hybrid_shard_zero2"})
      add(s, 4, 2, p);
  }
  // Accumulation, recompute and prefetch off on the GPU path too.
  E2eConfig acc;
  acc.micro_batches = 2;
  acc.reduce = "last";
  acc.recompute = "block";
  acc.forward_prefetch = false;
  acc.backward = "none";
  out.push_back(acc);
  E2eConfig hybrid_acc;
  hybrid_acc.sharding = "hybrid_shard";
  hybrid_acc.world = 4;
  hybrid_acc.shard_group = 2;
  hybrid_acc.param = "bf16";
  hybrid_acc.reduce_dtype = "bf16";
  hybrid_acc.micro_batches = 2;
  out.push_back(hybrid_acc);
  // offload = cpu: shards, gradient shards and optimizer state in pinned host
  // memory, the norm, the optimizer and the cross-replica all-reduce on the
  // host, against the CPU binary's offload run.
  auto offload = [&](std::string sharding, int world, int shard_group, std::string param,
                     int micro_batches) {
    E2eConfig c;
    c.sharding = std::move(sharding);
    c.world = world;
    c.shard_group = shard_group;
    c.param = c.reduce_dtype = std::move(param);
    c.micro_batches = micro_batches;
    c.offload = "cpu";
    out.push_back(c);
  };
  offload("full_shard", 1, 0, "fp32", 1);
  offload("full_shard", 2, 0, "fp32", 1);
  offload("hybrid_shard", 4, 2, "fp32", 1);
  offload("full_shard", 2, 0, "fp32", 4);    // accumulating into the host shard
  offload("full_shard", 2, 0, "bf16", 1);    // bf16 reduce-scatter widened into fp32 on the host
  offload("hybrid_shard", 4, 2, "bf16", 2);  // the host's fp32 accumulator reduced in bf16
  // fp16 with dynamic loss scaling: fp16 GEMMs, kernels and NCCL reductions
  // with the pre/post divide, against the CPU binary's fp16 run.
  add("full_shard", 1, 0, "fp16");
  add("full_shard", 2, 0, "fp16");
  add("hybrid_shard", 4, 2, "fp16");
  E2eConfig fp16_fp32_reduce;
  fp16_fp32_reduce.world = 2;
  fp16_fp32_reduce.param = "fp16";
  out.push_back(fp16_fp32_reduce);
  offload("full_shard", 2, 0, "fp16", 2);
  // Checkpointed activations through pinned host memory on the copy stream,
  // alone (fp32, bf16 with accumulation) and with the parameters' offload.
  for (auto [param, micro_batches, params_too] :
       {std::tuple{"fp32", 1, false}, {"bf16", 2, false}, {"fp32", 2, true}}) {
    E2eConfig c;
    c.world = 2;
    c.param = c.reduce_dtype = param;
    c.micro_batches = micro_batches;
    c.recompute = "block";
    c.offload_activations = true;
    if (params_too) c.offload = "cpu";
    out.push_back(c);
  }
  // Sub-block units (each linear): every strategy, recompute spanning a
  // block's units, activations and parameters through the host, fp16 (the
  // GPT-1T configuration), and explicit pieces beside whole blocks.
  for (std::string s :
       {"full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"}) {
    E2eConfig c;
    c.units = "each linear";
    c.sharding = s;
    const bool hybrid = s.rfind("hybrid", 0) == 0;
    c.world = hybrid ? 4 : 2;
    c.shard_group = hybrid ? 2 : 0;
    c.param = c.reduce_dtype = s == "full_shard" ? "fp32" : "bf16";
    c.recompute = s == "no_shard" ? "none" : "block";
    out.push_back(c);
  }
  E2eConfig linear_1t;
  linear_1t.units = "each linear";
  linear_1t.param = linear_1t.reduce_dtype = "fp16";
  linear_1t.recompute = "block";
  linear_1t.offload = "cpu";
  linear_1t.offload_activations = true;
  linear_1t.optimizer = "sgd(lr = 0.1, momentum = 0)";
  out.push_back(linear_1t);
  E2eConfig pieces;
  pieces.units = "unit a [block 0, block 1.ln_1, block 1.attn]  unit b [block 2.mlp.c_fc]";
  pieces.recompute = "block";
  pieces.world = 4;
  out.push_back(pieces);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaTraining, ::testing::ValuesIn(training_configs()),
                         [](const auto& info) { return info.param.name(); });

// llama on the GPU (RMSNorm, rotary positions, SwiGLU, grouped-query flash
// attention) against the CPU binary: each strategy, fp32 and bf16,
// accumulation with recompute, and offload.
std::vector<E2eConfig> llama_configs() {
  std::vector<E2eConfig> out;
  for (std::string p : {"fp32", "bf16"})
    for (const auto& [s, w, g] : {std::tuple{"full_shard", 2, 0}, std::tuple{"no_shard", 1, 0},
                                  std::tuple{"hybrid_shard", 4, 2}}) {
      E2eConfig c;
      c.family = "llama";
      c.tied = false;
      c.sharding = s;
      c.world = w;
      c.shard_group = g;
      c.param = c.reduce_dtype = p;
      out.push_back(c);
    }
  E2eConfig acc;
  acc.family = "llama";
  acc.micro_batches = 2;
  acc.recompute = "block";
  out.push_back(acc);
  E2eConfig offload;
  offload.family = "llama";
  offload.offload = "cpu";
  out.push_back(offload);
  E2eConfig fp16;
  fp16.family = "llama";
  fp16.param = fp16.reduce_dtype = "fp16";
  out.push_back(fp16);
  for (std::string p : {"fp32", "bf16"}) {  // sub-block units, recompute spanning them
    E2eConfig linear;
    linear.family = "llama";
    linear.units = "each linear";
    linear.recompute = "block";
    linear.param = linear.reduce_dtype = p;
    linear.offload_activations = p == "bf16";
    out.push_back(linear);
  }
  return out;
}

// A custom layer (examples/layers/swiglu_mlp.h) with its CUDA entry points
// (swiglu_mlp.cu, compiled by nvcc into the program): the CUDA binary's
// losses equal the CPU binary's, which runs the layer's CPU entry points.
std::string swiglu_layers() {
  return example_layers("swiglu_mlp.h", "mlp = SwiGluMlp(d_model = width, d_ff = 88)") +
         fmt::format("  cuda = \"{}/examples/layers/swiglu_mlp.cu\"\n", FSDPGEN_SOURCE_DIR);
}

std::vector<E2eConfig> custom_layer_configs() {
  std::vector<E2eConfig> out;
  E2eConfig c;  // full_shard on 2 ranks, recomputed
  c.layers = swiglu_layers();
  c.recompute = "block";
  out.push_back(c);
  c = {};
  c.layers = swiglu_layers();
  c.world = 1;
  c.param = c.reduce_dtype = "bf16";
  c.units = "each linear";
  out.push_back(c);
  c = {};
  c.family = "llama";
  c.layers = swiglu_layers();
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(CustomLayer, CudaTraining, ::testing::ValuesIn(custom_layer_configs()),
                         [](const auto& info) { return info.param.name(); });

INSTANTIATE_TEST_SUITE_P(Llama, CudaTraining, ::testing::ValuesIn(llama_configs()),
                         [](const auto& info) { return info.param.name(); });

// The llama options' families (CudaE2e.h) in fp32 and bf16, and Gemma 3's
// pieces with each linear a unit and recomputed (a block's last piece saves
// more than the block's output there).
std::vector<E2eConfig> llama_family_training_configs() {
  std::vector<E2eConfig> out;
  for (const char* p : {"fp32", "bf16"})
    for (const E2eConfig& c : llama_family_configs(p))
      out.push_back(c);
  E2eConfig pieces = llama_family_configs("fp32").back();
  pieces.units = "each linear";
  pieces.recompute = "block";
  out.push_back(pieces);
  return out;
}

INSTANTIATE_TEST_SUITE_P(LlamaFamilies, CudaTraining,
                         ::testing::ValuesIn(llama_family_training_configs()),
                         [](const auto& info) { return info.param.name(); });

// Padded vocabulary on the GPU (vocab 100 stored as 128 rows, the LM-head
// GEMMs over 128 columns, the cross-entropy over the true 100): per-step
// losses of the padded CUDA binary against the unpadded CUDA binary and the
// unpadded CPU binary, within loss_tolerance (cuBLASLt may pick other
// kernels for the wider GEMMs: summation order only, as CUDA against CPU).
class CudaPaddedVocab : public CudaTraining {};

TEST_P(CudaPaddedVocab, EqualsUnpadded) {
  E2eConfig padded = GetParam(), unpadded = GetParam();
  padded.vocab = unpadded.vocab = 100;
  padded.pad_vocab_to = 128;
  unpadded.pad_vocab_to = 1;
  const std::vector<double> cpu = train_losses("cpu_" + unpadded.name(), unpadded);
  const std::vector<double> plain = cuda_losses("cuda_" + unpadded.name(), unpadded);
  const std::vector<double> gpu = cuda_losses("cuda_" + padded.name(), padded);
  ASSERT_EQ(cpu.size(), static_cast<size_t>(padded.steps));
  ASSERT_EQ(plain.size(), cpu.size());
  ASSERT_EQ(gpu.size(), cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], plain[i], loss_tolerance(padded)) << "step " << i + 1 << " vs unpadded";
    EXPECT_NEAR(gpu[i], cpu[i], loss_tolerance(padded)) << "step " << i + 1 << " vs cpu";
  }
}

std::vector<E2eConfig> padded_vocab_configs() {
  E2eConfig single;
  single.world = 1;
  E2eConfig bf16_hybrid;
  bf16_hybrid.sharding = "hybrid_shard";
  bf16_hybrid.world = 4;
  bf16_hybrid.shard_group = 2;
  bf16_hybrid.param = bf16_hybrid.reduce_dtype = "bf16";
  bf16_hybrid.tied = false;
  return {single, bf16_hybrid};
}

INSTANTIATE_TEST_SUITE_P(Configs, CudaPaddedVocab, ::testing::ValuesIn(padded_vocab_configs()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fsdpgen::test
