// Equivalence: every strategy, world size, accumulation, precision, prefetch
// and recompute setting trains exactly as one process would on the same
// data. A covering set (every strategy meets every value of every other
// knob, not the full product) is compared step by step, in the loss and in
// the gradient norm before clipping, with the single-rank no_shard run whose
// one micro-batch holds the whole global batch (world * micro_batches *
// micro_batch sequences), so the same set also shows that 4 micro-batches of
// B equal one micro-batch of 4B. SGD without clipping at world > 1 for every
// strategy makes a wrong gradient scale show in the loss too (clipping and
// AdamW hide it there).
//
// Tolerances: about 4x the largest relative difference per step measured
// over the covering set (4 steps, this machine's OpenBLAS), rounded up.
//   param  loss: measured -> tolerance   grad_norm: measured -> tolerance
//   fp32         5.9e-7   -> 2.5e-6                 8.3e-6  -> 4e-5
//   fp16         1.75e-4  -> 8e-4                   1.55e-3 -> 7e-3
//   bf16         6.9e-4   -> 3e-3                   1.61e-2 -> 7e-2
// llama fp32    2.9e-6   -> 1e-5                   5.9e-5  -> 2.5e-4
// fp32 differs only in summation order (across ranks and micro-batches);
// llama's fp32 runs differ more after AdamW's first step, which turns
// gradients of any size into updates of about lr, so a gradient near zero
// whose sign depends on the summation order moves its weight by lr either
// way (its first step's loss and norm match to 1e-9, and the same runs with
// SGD to 1e-8);
// 16-bit params round activations and unsharded gradients (bf16 to 8 bits
// of mantissa, fp16 to 11), and a different reduction order rounds
// differently, which the optimizer carries into later steps (the fp16
// reference's loss scale differs from a sharded run's by a power of two,
// which is exact). Each config's loss must also move over its steps by more
// than 5 loss tolerances, so that a 2x error in the learning rate or the
// gradient scale, which shifts the loss by a good part of its movement,
// cannot hide in the tolerance: halving the learning rate at world > 1 fails
// every multi-rank config, bf16 included (there by 1.2-3.2x the loss
// tolerance and 1.6-7.5x the norm tolerance). 20 tolerances would need more
// movement than a few steps give bf16: 8 steps or a 3x learning rate grow
// its error as fast as its movement.
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

// Relative tolerances per step (see the header for where they come from).
struct tolerance {
  double loss, grad_norm;
};

tolerance tolerance_of(const E2eConfig& c) {
  if (c.param == "fp32")
    return c.family == "llama" ? tolerance{1e-5, 2.5e-4} : tolerance{2.5e-6, 4e-5};
  if (c.param == "fp16") return {8e-4, 7e-3};
  return {3e-3, 7e-2};
}

// How many loss tolerances the loss must move over the steps compared.
constexpr double kMovedTolerances = 5;

// SGD with momentum and no clipping at world > 1 (hybrid: world 4 in shard
// groups of 2): the update is proportional to the gradient, so a wrong
// gradient scale (dividing by the world twice, counting replicas twice)
// changes the loss as well as the norm. lr 0.5 moves the loss by about 5%
// in 4 steps (0.1 moved it 0.2%).
E2eConfig sgd_without_clipping(const std::string& sharding) {
  E2eConfig c;
  c.sharding = sharding;
  const bool hybrid = sharding.rfind("hybrid", 0) == 0;
  c.world = hybrid ? 4 : 2;
  c.shard_group = hybrid ? 2 : 0;
  c.optimizer = "sgd(lr = 0.5, momentum = 0.9, weight_decay = 0.01)";
  c.clip = "none";
  return c;
}

std::vector<E2eConfig> covering_set() {
  const std::vector<std::string> strategies = {"full_shard", "shard_grad_op", "no_shard",
                                               "hybrid_shard", "hybrid_shard_zero2"};
  const std::vector<std::string> backward = {"pre", "post", "none"};
  const int worlds[] = {1, 2, 4};
  std::vector<E2eConfig> out;
  for (const std::string& s : strategies)
    out.push_back(sgd_without_clipping(s));
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
  // Checkpointed activations on the host: alone, with the parameters', with
  // accumulation and hybrid, and on one rank.
  E2eConfig acts;
  acts.recompute = "block";
  acts.offload_activations = true;
  out.push_back(acts);
  E2eConfig acts_all = acts;
  acts_all.offload = "cpu";
  acts_all.micro_batches = 2;
  acts_all.reduce = "last";
  out.push_back(acts_all);
  E2eConfig acts_hybrid = acts;
  acts_hybrid.sharding = "hybrid_shard";
  acts_hybrid.world = 4;
  acts_hybrid.shard_group = 2;
  acts_hybrid.micro_batches = 2;
  out.push_back(acts_hybrid);
  E2eConfig acts_single = acts;
  acts_single.world = 1;
  acts_single.sharding = "no_shard";
  out.push_back(acts_single);
  E2eConfig grouped;
  grouped.world = 4;
  grouped.units = "group 2 blocks";
  grouped.max_inflight = 3;
  out.push_back(grouped);
  // Sub-block units (the FSDP paper's GPT-1T wraps each linear layer):
  // every strategy, with recompute spanning a block's units, activation and
  // parameter offload, accumulation; and explicit pieces beside a whole block.
  const std::vector<std::string> linear_strategies = {"full_shard", "shard_grad_op", "no_shard",
                                                      "hybrid_shard", "hybrid_shard_zero2"};
  for (size_t i = 0; i < linear_strategies.size(); ++i) {
    E2eConfig c;
    c.units = "each linear";
    c.sharding = linear_strategies[i];
    const bool hybrid = c.sharding.rfind("hybrid", 0) == 0;
    c.world = hybrid || i == 1 ? 4 : 2;
    c.shard_group = hybrid ? 2 : 0;
    c.recompute = i == 2 ? "none" : "block";
    c.offload_activations = i == 0 || i == 3;
    c.micro_batches = i == 1 || i == 3 ? 2 : 1;
    c.backward = i == 4 ? "post" : "pre";
    c.max_inflight = i == 0 ? 3 : 2;
    out.push_back(c);
  }
  E2eConfig linear_all = acts_all;  // one rank, parameters and activations on the host
  linear_all.units = "each linear";
  linear_all.world = 1;
  out.push_back(linear_all);
  E2eConfig linear_bf16;
  linear_bf16.units = "each linear";
  linear_bf16.param = linear_bf16.reduce_dtype = "bf16";
  linear_bf16.recompute = "block";
  out.push_back(linear_bf16);
  for (const char* recompute : {"none", "block"}) {
    E2eConfig pieces;
    pieces.units = "unit a [block 0, block 1.ln_1, block 1.attn]  unit b [block 2.mlp.c_fc]";
    pieces.recompute = recompute;
    pieces.world = 4;
    out.push_back(pieces);
  }
  // GPT-1T's configuration in miniature (specs/gpt-1t.fsdp): fp16 with
  // dynamic loss scaling, plain SGD, each linear, recompute, parameters and
  // activations offloaded.
  E2eConfig like_1t;
  like_1t.units = "each linear";
  like_1t.param = like_1t.reduce_dtype = "fp16";
  like_1t.optimizer = "sgd(lr = 1.0, momentum = 0)";  // moves the loss well past the tolerance
  like_1t.recompute = "block";
  like_1t.offload = "cpu";
  like_1t.offload_activations = true;
  out.push_back(like_1t);
  E2eConfig tail;  // a unit of a block's last pieces and the next whole block, recomputed together
  tail.units = "unit t [block 0.mlp, block 1]";
  tail.recompute = "block";
  tail.offload_activations = true;
  out.push_back(tail);
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
  // Its 4th step overflows fp16 in the replica all-reduce (loss scale 2^16 x
  // post-divide 2) and is skipped, where the single-rank run (2^16) applies
  // it: a difference of dynamic loss scaling, not of sharding, so the
  // comparison stops before it.
  fp16_hybrid.steps = 3;
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
  r.family = c.family;
  r.sharding = "no_shard";
  r.world = 1;
  r.micro_batch = c.world * c.micro_batches * c.micro_batch;
  r.param = c.param;
  r.tied = c.tied;
  r.qkv_bias = c.qkv_bias;
  r.qwen3 = c.qwen3;
  r.olmo2 = c.olmo2;
  r.sliding_window = c.sliding_window;
  r.gemma = c.gemma;
  r.gemma_sandwich = c.gemma_sandwich;
  r.optimizer = c.optimizer;
  r.steps = c.steps;
  r.clip = c.clip;
  return r;
}

// Reference metrics, computed once per reference spec and build and shared by
// the tests (which CTest may run in parallel processes): guarded by a file
// lock, and valid while dir/done holds this build's key.
std::vector<nlohmann::json> reference_metrics(const E2eConfig& c) {
  E2eConfig r = reference_of(c);
  std::string name =
      fmt::format("reference_{}_{:016x}", r.name(), std::hash<std::string>{}(r.spec()));
  std::filesystem::path dir = e2e_dir(name);
  return with_dir_lock(dir, [&] {
    if (file_bytes(dir / "done") == build_key()) return read_metrics(dir / "metrics.jsonl");
    std::filesystem::remove(dir / "done");
    std::vector<nlohmann::json> m = run_metrics(r, build_binary(dir, r.spec()), "metrics.jsonl");
    if (m.size() == static_cast<size_t>(r.steps)) std::ofstream(dir / "done") << build_key();
    return m;
  });
}

double relative(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

// Every way the steps of `got` differ from the single-rank run's beyond tol:
// the step count, a skipped step, the loss or the gradient norm (empty when
// they match).
std::vector<std::string> step_mismatches(const std::vector<nlohmann::json>& got,
                                         const std::vector<nlohmann::json>& want,
                                         const tolerance& tol) {
  if (got.size() != want.size())
    return {fmt::format("{} steps, single rank {}", got.size(), want.size())};
  std::vector<std::string> out;
  for (size_t s = 0; s < got.size(); ++s) {
    auto check = [&](const char* key, double limit) {
      const nlohmann::json &g = got[s].at(key), &w = want[s].at(key);
      if (!g.is_number() || !w.is_number()) {
        if (g != w)
          out.push_back(
              fmt::format("step {}: {} {}, single rank {}", s + 1, key, g.dump(), w.dump()));
        return;
      }
      const double rel = relative(g.get<double>(), w.get<double>());
      if (!(rel <= limit))
        out.push_back(
            fmt::format("step {}: {} {:.9g}, single rank {:.9g}, relative difference "
                        "{:.2e} > {:.1e}",
                        s + 1, key, g.get<double>(), w.get<double>(), rel, limit));
    };
    check("skipped", 0);
    check("loss", tol.loss);
    check("grad_norm", tol.grad_norm);
  }
  return out;
}

void print_steps(const std::vector<nlohmann::json>& got, const std::vector<nlohmann::json>& want) {
  for (size_t s = 0; s < std::min(got.size(), want.size()); ++s) {
    const double loss = got[s].at("loss").get<double>(), loss1 = want[s].at("loss").get<double>();
    std::printf("step %zu: loss %.9f, single rank %.9f, relative difference %.2e", s + 1, loss,
                loss1, relative(loss, loss1));
    if (got[s].at("grad_norm").is_number() && want[s].at("grad_norm").is_number()) {
      const double norm = got[s].at("grad_norm").get<double>();
      const double norm1 = want[s].at("grad_norm").get<double>();
      std::printf("; grad_norm %.9f, single rank %.9f, relative difference %.2e", norm, norm1,
                  relative(norm, norm1));
    }
    std::printf("\n");
  }
}

class Equivalence : public ::testing::TestWithParam<E2eConfig> {};

TEST_P(Equivalence, StepsMatchTheSingleRankRun) {
  const E2eConfig& c = GetParam();
  const std::vector<nlohmann::json> want = reference_metrics(c);
  const std::vector<nlohmann::json> got =
      run_metrics(c, shared_binary(e2e_dir(c.name()), c.spec()), "metrics.jsonl");
  ASSERT_EQ(got.size(), static_cast<size_t>(c.steps));
  print_steps(got, want);
  const tolerance tol = tolerance_of(c);
  for (const std::string& m : step_mismatches(got, want, tol))
    ADD_FAILURE() << m;
  // The loss moves far more than the tolerance, so a wrong learning rate or
  // gradient scale shows.
  const double moved =
      relative(got.back().at("loss").get<double>(), got.front().at("loss").get<double>());
  std::printf("loss moved %.2e relative over %d steps (tolerance %.1e)\n", moved, c.steps,
              tol.loss);
  EXPECT_GT(moved, kMovedTolerances * tol.loss) << "the loss should move";
}

INSTANTIATE_TEST_SUITE_P(Covering, Equivalence, ::testing::ValuesIn(covering_set()),
                         [](const auto& info) { return info.param.name(); });

// llama: every strategy once, with grouped-query attention and rotary
// positions sharded like any layer; between them accumulation, recompute,
// bf16, SGD without clipping (a wrong gradient scale shows in the loss),
// offload and an untied head.
std::vector<E2eConfig> llama_set() {
  std::vector<E2eConfig> out;
  const std::vector<std::string> strategies = {"full_shard", "shard_grad_op", "no_shard",
                                               "hybrid_shard", "hybrid_shard_zero2"};
  for (size_t i = 0; i < strategies.size(); ++i) {
    E2eConfig c;
    c.family = "llama";
    c.sharding = strategies[i];
    const bool hybrid = c.sharding.rfind("hybrid", 0) == 0;
    c.world = hybrid ? 4 : 2;
    c.shard_group = hybrid ? 2 : 0;
    c.micro_batches = i % 2 == 0 ? 1 : 2;
    c.recompute = i == 1 || i == 3 ? "block" : "none";
    c.backward = i == 4 ? "post" : "pre";
    c.tied = i != 2;
    if (i == 2) {
      c.optimizer = "sgd(lr = 0.5, momentum = 0.9, weight_decay = 0.01)";
      c.clip = "none";
    }
    if (i == 3) c.param = c.reduce_dtype = "bf16";
    out.push_back(c);
  }
  E2eConfig offload;
  offload.family = "llama";
  offload.offload = "cpu";
  offload.micro_batches = 2;
  out.push_back(offload);
  // Sub-block units: each linear (seven per block) with recompute spanning
  // them and the input on the host, and without recompute on 4 ranks (ZeRO-2).
  E2eConfig linear;
  linear.family = "llama";
  linear.units = "each linear";
  linear.recompute = "block";
  linear.offload_activations = true;
  out.push_back(linear);
  E2eConfig linear_zero2 = linear;
  linear_zero2.sharding = "shard_grad_op";
  linear_zero2.world = 4;
  linear_zero2.recompute = "none";
  linear_zero2.offload_activations = false;
  out.push_back(linear_zero2);
  E2eConfig pieces;  // a block's attention in one unit, its q and k split from v
  pieces.family = "llama";
  pieces.units = "unit a [block 0.self_attn.q_proj, block 0.self_attn.k_proj]  each block";
  pieces.recompute = "block";
  out.push_back(pieces);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Llama, Equivalence, ::testing::ValuesIn(llama_set()),
                         [](const auto& info) { return info.param.name(); });

// Qwen2 (llama with qkv_bias): the biases sharded with their weights'
// pieces: each linear a unit (a bias with its weight) with recompute and the
// input on the host; q and k split from v; hybrid in bf16 with
// accumulation; offload with SGD without clipping (a wrong gradient scale
// shows in the loss).
std::vector<E2eConfig> qwen2_set() {
  E2eConfig linear;
  linear.family = "llama";
  linear.qkv_bias = true;
  linear.units = "each linear";
  linear.recompute = "block";
  linear.offload_activations = true;
  E2eConfig pieces = linear;
  pieces.units = "unit a [block 0.self_attn.q_proj, block 0.self_attn.k_proj]  each block";
  pieces.offload_activations = false;
  E2eConfig hybrid = pieces;
  hybrid.units = "each block";
  hybrid.recompute = "none";
  hybrid.sharding = "hybrid_shard";
  hybrid.world = 4;
  hybrid.shard_group = 2;
  hybrid.micro_batches = 2;
  hybrid.param = hybrid.reduce_dtype = "bf16";
  E2eConfig offload = hybrid;
  offload.sharding = "shard_grad_op";
  offload.world = 2;
  offload.shard_group = 0;
  offload.micro_batches = 1;
  offload.param = offload.reduce_dtype = "fp32";
  offload.offload = "cpu";
  offload.optimizer = "sgd(lr = 0.5, momentum = 0.9, weight_decay = 0.01)";
  offload.clip = "none";
  return {linear, pieces, hybrid, offload};
}

INSTANTIATE_TEST_SUITE_P(Qwen2, Equivalence, ::testing::ValuesIn(qwen2_set()),
                         [](const auto& info) { return info.param.name(); });

// Qwen3 (llama with qk_norm and a head size apart from width / heads): the
// same four layouts as Qwen2's, the q and k norms in their weights' pieces.
std::vector<E2eConfig> qwen3_set() {
  std::vector<E2eConfig> set = qwen2_set();
  for (E2eConfig& c : set) {
    c.qkv_bias = false;
    c.qwen3 = true;
  }
  return set;
}

INSTANTIATE_TEST_SUITE_P(Qwen3, Equivalence, ::testing::ValuesIn(qwen3_set()),
                         [](const auto& info) { return info.param.name(); });

// Mistral (llama with a sliding window of 5 in sequences of 16): the same
// four layouts as Qwen2's, without the biases.
std::vector<E2eConfig> mistral_set() {
  std::vector<E2eConfig> set = qwen2_set();
  for (E2eConfig& c : set) {
    c.qkv_bias = false;
    c.sliding_window = 5;
  }
  return set;
}

INSTANTIATE_TEST_SUITE_P(Mistral, Equivalence, ::testing::ValuesIn(mistral_set()),
                         [](const auto& info) { return info.param.name(); });

// OLMo 2 (llama with its norms after attention and the MLP and q's and k's
// norms across heads): the same four layouts as Qwen2's, without the biases;
// the post-norm block's pieces are its own (q_proj first, the norms after
// o_proj and down_proj). The hybrid layout with 2 micro-batches runs in fp32:
// in bf16, from fsdpgen's init of std 0.02, the post norms scale attention's
// and the MLP's small outputs up, bf16's rounding with them, and the hybrid
// and single-rank bf16 runs were 15% apart in gradient norm by step 3 (with
// SGD; with AdamW at lr 1e-2 the loss moved 3.4e-3 in 4 steps, under 5
// times bf16's tolerance), where the fp32 layouts match to 6e-6.
std::vector<E2eConfig> olmo2_set() {
  std::vector<E2eConfig> set = qwen2_set();
  for (E2eConfig& c : set) {
    c.qkv_bias = false;
    c.olmo2 = true;
  }
  set[2].param = set[2].reduce_dtype = "fp32";
  return set;
}

INSTANTIATE_TEST_SUITE_P(Olmo2, Equivalence, ::testing::ValuesIn(olmo2_set()),
                         [](const auto& info) { return info.param.name(); });

// Gemma (llama with the embedding scaled by sqrt(width), (1 + weight) norms
// and GeGLU): the same four layouts as Qwen2's, without the biases; the
// embedding's scaled gradient and the norms' zero-initialized weights
// sharded, split into pieces and offloaded like any other.
std::vector<E2eConfig> gemma_set() {
  std::vector<E2eConfig> set = qwen2_set();
  for (E2eConfig& c : set) {
    c.qkv_bias = false;
    c.gemma = true;
  }
  return set;
}

INSTANTIATE_TEST_SUITE_P(Gemma, Equivalence, ::testing::ValuesIn(gemma_set()),
                         [](const auto& info) { return info.param.name(); });

// Gemma 2's and 3's pieces together (Gemma 3's sandwich norms and q/k norms,
// alternating local and global layers with the local layers' own rotary
// base, Gemma 2's soft-caps and query scalar): Gemma's four layouts; o_proj's
// and down_proj's pieces carry the norms after them through per-linear units,
// recompute and offload.
std::vector<E2eConfig> gemma_sandwich_set() {
  std::vector<E2eConfig> set = gemma_set();
  for (E2eConfig& c : set)
    c.gemma_sandwich = true;
  return set;
}

INSTANTIATE_TEST_SUITE_P(GemmaSandwich, Equivalence, ::testing::ValuesIn(gemma_sandwich_set()),
                         [](const auto& info) { return info.param.name(); });

// The comparison sees hybrid replicas counted twice: the hybrid SGD run of
// the covering set, with every gradient doubled at world > 1, mismatches
// the single-rank run in the gradient norm from step 1 and in the loss.
TEST(EquivalenceCheck, SeesDoubledGradientsInAHybridRun) {
  const E2eConfig c = sgd_without_clipping("hybrid_shard");
  const std::vector<nlohmann::json> got = run_metrics(c, shared_binary(e2e_dir(c.name()), c.spec()),
                                                      "doubled.jsonl", "--inject-grad-scale 2");
  ASSERT_EQ(got.size(), static_cast<size_t>(c.steps));
  const std::vector<std::string> mismatches =
      step_mismatches(got, reference_metrics(c), tolerance_of(c));
  std::string all;
  for (const std::string& m : mismatches)
    all += m + "\n";
  std::printf("%s", all.c_str());
  EXPECT_NE(all.find("step 1: grad_norm"), std::string::npos) << all;
  EXPECT_NE(all.find(": loss"), std::string::npos) << all;
}

// The build key changes with any byte of any hashed file (so a rebuilt
// runtime library invalidates cached binaries and reference runs), and the
// key of this build covers fsdpgen and the runtime libraries.
TEST(E2eCache, BuildKeyChangesWithAnyByteOfTheBuild) {
  const std::filesystem::path dir = e2e_dir("build_key");
  const std::filesystem::path a = dir / "a", b = dir / "b";
  std::ofstream(a, std::ios::binary) << std::string(4096, 'x');
  std::ofstream(b, std::ios::binary) << std::string(4096, 'y');
  const uint64_t key = fnv1a64_of_files({a, b});
  EXPECT_EQ(fnv1a64_of_files({a, b}), key);
  {
    std::fstream f(b, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1234);
    f.put('z');
  }
  EXPECT_NE(fnv1a64_of_files({a, b}), key);
  std::ofstream(b, std::ios::binary) << std::string(4096, 'y');
  EXPECT_EQ(fnv1a64_of_files({a, b}), key);
  std::ofstream(b, std::ios::binary) << std::string(4095, 'y');  // one byte shorter
  EXPECT_NE(fnv1a64_of_files({a, b}), key);

  const std::vector<std::filesystem::path> inputs = build_inputs();
  ASSERT_GE(inputs.size(), 3u);
  for (const std::filesystem::path& f : inputs)
    EXPECT_GT(std::filesystem::file_size(f), 0u) << f;
  EXPECT_EQ(build_key().size(), 16u);
}

}  // namespace
}  // namespace fsdpgen::test
