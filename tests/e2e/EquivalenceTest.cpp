// Equivalence: every strategy, world size, accumulation, precision, prefetch
// and recompute setting trains exactly as one process would on the same
// data. A covering set (every strategy meets every value of every other
// knob, not the full product) is compared step by step with the
// single-rank no_shard run whose one micro-batch holds the whole global
// batch (world * micro_batches * micro_batch sequences), so the same set
// also shows that 4 micro-batches of B equal one micro-batch of 4B.
//
// Tolerances. fp32: relative 1e-5 per step (only summation order differs:
// reductions across ranks and micro-batches). bf16 params: 2e-2 relative
// against the single-rank bf16 run: activations and unsharded gradients are
// rounded to 8 bits of mantissa (relative 2^-9 per rounding), and a
// different reduction order rounds differently, which the optimizer
// carries into later steps. fp16 params: 11 bits of mantissa (8x finer than
// bf16) but the same kinds of differences; 5e-3 relative against the
// single-rank fp16 run, whose loss scale (2^16) differs from a sharded run's
// (2^16 x the post-divide factor) by a power of two, which is exact.
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

std::vector<E2eConfig> covering_set() {
  const std::vector<std::string> strategies = {"full_shard", "shard_grad_op", "no_shard",
                                               "hybrid_shard", "hybrid_shard_zero2"};
  const std::vector<std::string> backward = {"pre", "post", "none"};
  const int worlds[] = {1, 2, 4};
  std::vector<E2eConfig> out;
  for (size_t i = 0; i < strategies.size(); ++i) {
    for (int j = 0; j < 3; ++j) {
      E2eConfig c;
      c.sharding = strategies[i];
      c.world = worlds[(static_cast<size_t>(j) + i) % 3];
      bool hybrid = c.sharding.rfind("hybrid", 0) == 0;
      if (hybrid) c.shard_group = c.world == 4 ? 2 : (c.world == 2 && i == 3 ? 1 : c.world);
      c.backward = backward[static_cast<size_t>(j)];
      c.micro_batches = j == 1 ? 1 : 4;
      c.reduce = j == 2 ? "last" : "every";
      c.param = j == 1 ? "bf16" : "fp32";
      c.reduce_dtype = c.param;
      c.forward_prefetch = j != 1;
      c.recompute = j == 0 ? "none" : "block";
      out.push_back(c);
    }
  }
  // Options the pairs above leave out, each once.
  E2eConfig offload;
  offload.offload = "cpu";
  offload.micro_batches = 2;
  out.push_back(offload);
  E2eConfig offload_single = offload;  // the step's gradients copied once to the host shard
  offload_single.world = 1;
  out.push_back(offload_single);
  E2eConfig offload_hybrid = offload;  // host shards all-reduced across replicas in bf16
  offload_hybrid.sharding = "hybrid_shard";
  offload_hybrid.world = 4;
  offload_hybrid.shard_group = 2;
  offload_hybrid.param = offload_hybrid.reduce_dtype = "bf16";
  out.push_back(offload_hybrid);
  E2eConfig grouped;
  grouped.world = 4;
  grouped.units = "group 2 blocks";
  grouped.max_inflight = 3;
  out.push_back(grouped);
  E2eConfig sgd;
  sgd.sharding = "shard_grad_op";
  sgd.optimizer = "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)";
  out.push_back(sgd);
  E2eConfig untied;
  untied.tied = false;
  untied.backward = "post";
  out.push_back(untied);
  E2eConfig hybrid_bf16;  // an fp32 accumulator all-reduced in bf16 across replicas
  hybrid_bf16.sharding = "hybrid_shard";
  hybrid_bf16.world = 4;
  hybrid_bf16.shard_group = 2;
  hybrid_bf16.micro_batches = 2;
  hybrid_bf16.param = hybrid_bf16.reduce_dtype = "bf16";
  out.push_back(hybrid_bf16);
  // fp16 with dynamic loss scaling: fp16 reductions with the pre/post divide
  // (world 2: pre 2, post 1; world 4: pre 2, post 2, and the hybrid replica
  // all-reduce of an fp32 accumulator narrowed to fp16), and fp16 params
  // reduced in fp32.
  E2eConfig fp16_full;
  fp16_full.micro_batches = 2;
  fp16_full.param = fp16_full.reduce_dtype = "fp16";
  out.push_back(fp16_full);
  E2eConfig fp16_hybrid = hybrid_bf16;
  fp16_hybrid.param = fp16_hybrid.reduce_dtype = "fp16";
  out.push_back(fp16_hybrid);
  E2eConfig fp16_zero2;
  fp16_zero2.sharding = "shard_grad_op";
  fp16_zero2.world = 4;
  fp16_zero2.param = "fp16";
  fp16_zero2.recompute = "block";
  out.push_back(fp16_zero2);
  return out;
}

// The single-rank run that sees the same data in one micro-batch.
E2eConfig reference_of(const E2eConfig& c) {
  E2eConfig r;
  r.sharding = "no_shard";
  r.world = 1;
  r.micro_batch = c.world * c.micro_batches * c.micro_batch;
  r.param = c.param;
  r.tied = c.tied;
  r.optimizer = c.optimizer;
  r.steps = c.steps;
  return r;
}

// Reference losses, computed once per reference and shared by the tests
// (which CTest may run in parallel processes): guarded by a file lock.
std::vector<double> reference_losses(const E2eConfig& c) {
  E2eConfig r = reference_of(c);
  // Keyed by the spec's text, so that a changed test never reuses a stale run.
  std::string name =
      fmt::format("reference_{}_{:016x}", r.name(), std::hash<std::string>{}(r.spec()));
  std::filesystem::path dir = e2e_dir(name);
  return with_dir_lock(dir, [&] {
    if (std::filesystem::exists(dir / "done")) return read_losses(dir / "metrics.jsonl");
    std::vector<double> losses = train_losses(name, r);
    if (!losses.empty()) std::ofstream(dir / "done") << "ok\n";
    return losses;
  });
}

class Equivalence : public ::testing::TestWithParam<E2eConfig> {};

TEST_P(Equivalence, LossesMatchTheSingleRankRun) {
  const E2eConfig& c = GetParam();
  std::vector<double> want = reference_losses(c);
  std::vector<double> got = train_losses(c.name(), c);
  ASSERT_EQ(got.size(), static_cast<size_t>(c.steps));
  ASSERT_EQ(want.size(), got.size());
  const double tolerance = c.param == "fp32" ? 1e-5 : c.param == "fp16" ? 5e-3 : 2e-2;
  for (size_t s = 0; s < got.size(); ++s) {
    double rel = std::abs(got[s] - want[s]) / std::abs(want[s]);
    std::printf("step %zu: loss %.9f, single rank %.9f, relative difference %.2e\n", s + 1, got[s],
                want[s], rel);
    EXPECT_LE(rel, tolerance) << "step " << s + 1;
  }
  // AdamW visibly learns in four steps; SGD on batches this small need not.
  if (c.optimizer.rfind("adamw", 0) == 0) {
    EXPECT_LT(got.back(), got.front()) << "the loss should fall";
  }
}

INSTANTIATE_TEST_SUITE_P(Covering, Equivalence, ::testing::ValuesIn(covering_set()),
                         [](const auto& info) { return info.param.name(); });

}  // namespace
}  // namespace fsdpgen::test
