// tune (codegen/planner/Tune.h): the global batch kept, the spec's own configuration
// ranked, pruning that never changes the top, sound lower bounds, a winner
// that fits, the numerics kept unless allowed, and the spec rewrite that
// reads back as the winner.
#include <set>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "codegen/planner/Alternatives.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Planner.h"
#include "codegen/planner/Tune.h"
#include "codegen/planner/TuneSpace.h"
#include "dsl/Frontend.h"
#include "dsl/Source.h"
#include "dsl/Units.h"

namespace fsdpgen {
namespace {

std::string spec_path(const std::string& name) {
  return std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + name;
}

Spec load(const std::string& name, std::optional<int64_t> world = std::nullopt) {
  SpecOverrides o;
  o.world = world;
  FrontendResult r = load_spec_file(spec_path(name), o);
  EXPECT_TRUE(r.spec) << r.diagnostics;
  return *r.spec;
}

std::string text_of(const std::string& name) {
  std::string text, why;
  EXPECT_TRUE(read_file(spec_path(name), text, why)) << why;
  return text;
}

int64_t global_batch(const Spec& s) {
  return s.parallel.world * s.train.micro_batch * s.parallel.accumulate.micro_batches;
}

TEST(Tune, GlobalBatchKeptAndOwnConfigurationRanked) {
  const Spec spec = load("tiny.fsdp");
  const Hardware hw = *find_hardware("cpu");
  TuneOptions o;
  o.top = 1 << 20;  // every fitting candidate ranked
  o.prune = false;
  TuneResult r = tune(spec, hw, o);
  ASSERT_GT(r.planned, 100);
  EXPECT_EQ(r.planned, r.candidates);
  EXPECT_EQ(r.pruned_memory + r.pruned_time, 0);
  int own = 0;
  bool varied_batch = false;
  for (const TuneCandidate& c : r.all_planned) {
    EXPECT_EQ(global_batch(c.spec), global_batch(spec))
        << fmt::format("{}", fmt::join(c.changes, ", "));
    EXPECT_FALSE(c.batch_changed);
    EXPECT_EQ(c.spec.model, spec.model);
    EXPECT_EQ(c.spec.train.optimizer, spec.train.optimizer);
    EXPECT_EQ(c.spec.parallel.precision.param, spec.parallel.precision.param);
    varied_batch = varied_batch || c.spec.train.micro_batch != spec.train.micro_batch;
    own += c.own;
  }
  EXPECT_TRUE(varied_batch);
  EXPECT_EQ(own, 1);
  ASSERT_TRUE(r.own);
  EXPECT_TRUE(r.own->changes.empty());
  ASSERT_GT(r.own_rank, 0);
  EXPECT_TRUE(r.top[r.own_rank - 1].own);
  EXPECT_DOUBLE_EQ(r.top[r.own_rank - 1].step_ms, make_plan(spec, hw).timeline->step_ms);
  for (size_t i = 1; i < r.top.size(); ++i)
    EXPECT_LE(r.top[i - 1].step_ms, r.top[i].step_ms);
}

// Pruned and unpruned searches rank the same top; every bound the search
// used is below what the full plan found.
void expect_pruning_keeps_the_top(const Spec& spec, const Hardware& hw, TuneOptions o) {
  o.prune = false;
  const TuneResult full = tune(spec, hw, o);
  o.prune = true;
  const TuneResult pruned = tune(spec, hw, o);
  EXPECT_LT(pruned.planned, full.planned);
  EXPECT_EQ(pruned.candidates, full.candidates);
  EXPECT_EQ(pruned.planned + pruned.pruned_memory + pruned.pruned_time, pruned.candidates);
  ASSERT_EQ(pruned.top.size(), full.top.size());
  for (size_t i = 0; i < full.top.size(); ++i)
    EXPECT_DOUBLE_EQ(pruned.top[i].step_ms, full.top[i].step_ms) << i;
  for (const TuneCandidate& c : full.all_planned) {
    if (c.own) continue;  // planned before any bound
    EXPECT_LE(c.step_lower_bound_ms, c.step_ms * (1 + 1e-9))
        << fmt::format("{}", fmt::join(c.changes, ", "));
    EXPECT_LE(c.device_lower_bound_bytes, c.device_bytes)
        << fmt::format("{}", fmt::join(c.changes, ", "));
  }
}

// The live peak bound (codegen/planner/Memory.h's live_peaks, which counts the units
// prefetch keeps gathered at once) never exceeds the arenas of the full plan,
// over every sharding, units, recompute, offload, micro-batch and prefetch
// candidate; and it is tighter than the bound from the units alone.
void expect_live_peaks_below_the_arenas(const Spec& spec, const Hardware& hw,
                                        const std::vector<std::string>& keep) {
  TuneOptions o;
  o.top = 1;
  o.prune = false;
  o.keep = keep;
  const TuneResult r = tune(spec, hw, o);
  ASSERT_GT(r.all_planned.size(), 100u);
  int tighter = 0;
  std::set<int64_t> prefetch_peaks;
  for (const TuneCandidate& c : r.all_planned) {
    if (c.own) continue;  // planned before any bound
    const std::string what = fmt::format("{}", fmt::join(c.changes, ", "));
    EXPECT_GT(c.device_live_bytes, 0) << what;
    EXPECT_LE(c.device_live_bytes, c.device_bytes) << what;
    EXPECT_LE(c.host_live_bytes, c.host_bytes) << what;
    tighter += c.device_live_bytes > c.device_lower_bound_bytes;
    Spec same_but_prefetch = c.spec;
    same_but_prefetch.parallel.prefetch = spec.parallel.prefetch;
    if (same_but_prefetch.parallel == spec.parallel && same_but_prefetch.units == spec.units &&
        c.spec.train.micro_batch == spec.train.micro_batch)
      prefetch_peaks.insert(c.device_live_bytes);
  }
  EXPECT_GT(tighter, static_cast<int>(r.all_planned.size()) / 2);
  EXPECT_GT(prefetch_peaks.size(), 1u);  // what prefetch holds gathered shows in the bound
}

TEST(Tune, LivePeakBoundNeverExceedsThePlanTiny) {
  expect_live_peaks_below_the_arenas(load("tiny.fsdp"), *find_hardware("cpu"), {});
}

TEST(Tune, LivePeakBoundNeverExceedsThePlanOnAGpu) {
  // gpt2-124m over 8 A100-40GB with host offload among the candidates.
  expect_live_peaks_below_the_arenas(load("gpt2-124m.fsdp"), *find_hardware("a100-40g"),
                                     {"precision", "reduce", "sharding", "micro_batch"});
}

TEST(Tune, LivePeaksBoundTheArenasWithRedZones) {
  const Plan p = make_plan(load("tiny.fsdp"), *find_hardware("cpu"));
  for (const MemoryOptions& mo : {MemoryOptions{}, MemoryOptions{256, true, 4096}}) {
    const MemoryPlan m = plan_memory(*p.schedule, mo);
    const LivePeaks live = live_peaks(*p.schedule, mo);
    EXPECT_GE(live.device_bytes, m.live_peak_bytes);
    EXPECT_LE(live.device_bytes, m.device_arena_bytes);
    EXPECT_LE(live.host_bytes, m.host_arena_bytes);
  }
}

TEST(Tune, PruningNeverDropsABetterCandidateTiny) {
  TuneOptions o;
  o.top = 5;
  expect_pruning_keeps_the_top(load("tiny.fsdp"), *find_hardware("cpu"), o);
}

TEST(Tune, PruningNeverDropsABetterCandidateOnAGpu) {
  // gpt2-124m over 8 A100-40GB, where memory prunes and fits both happen.
  TuneOptions o;
  o.top = 3;
  o.keep = {"prefetch"};
  expect_pruning_keeps_the_top(load("gpt2-124m.fsdp"), *find_hardware("a100-40g"), o);
}

TEST(Tune, WinnerFitsAndBeatsTheSpec) {
  const Spec spec = load("gpt2-1.5b.fsdp", 8);
  const Hardware hw = *find_hardware("a100-40g");
  TuneOptions o;
  o.top = 3;
  o.keep = {"prefetch"};
  TuneResult r = tune(spec, hw, o);
  ASSERT_FALSE(r.top.empty());
  const TuneCandidate& w = r.top.front();
  EXPECT_TRUE(w.fits);
  Plan again = make_plan(w.spec, hw);
  EXPECT_TRUE(again.fits);
  EXPECT_DOUBLE_EQ(again.timeline->step_ms, w.step_ms);
  ASSERT_TRUE(r.own);
  EXPECT_LT(w.step_ms, r.own->step_ms);  // the spec recomputes at 17% of the device
  EXPECT_GT(r.pruned_memory + r.pruned_time, 0);
}

// Ranking worked out by hand on made-up figures: a machine whose compute is
// slow and whose links, copies, memory traffic and launches cost nothing, so
// that a step costs its GEMM FLOPs alone at one rate. Recompute then costs
// one more forward of every block: tiny's forward per token is 4 blocks x
// (24 C^2 for the projections + 2 T C for causal attention) + 2 C V for the
// head = 4 x 425,984 + 65,536 = 1,769,472 FLOPs, a step 3x that, and
// recompute adds 4 x 425,984: the spec below (recompute, two micro-batches)
// is 1 + 1,703,936 / 5,308,416 = 1.321x the winner, which recomputes nothing
// (the micro-batch split and everything else cost nothing here).
TEST(Tune, SyntheticFiguresRankAsWorkedOutByHand) {
  Hardware hw = *find_hardware("cpu");
  hw.name = "synthetic";
  hw.peak_fp32_flops = hw.peak_bf16_flops = hw.peak_fp16_flops = 1e9;
  hw.gemm_max_efficiency = 1;
  hw.gemm_half_flops = 0;
  hw.memory_bytes = hw.host_memory_bytes = int64_t{1} << 40;
  hw.memory_bytes_per_s = hw.host_memory_bytes_per_s = hw.host_link_bytes_per_s = 1e18;
  hw.intra_node = hw.inter_node = Link{1e18, 0};
  hw.collective_base_latency_s = hw.launch_overhead_s = 0;
  std::string text = text_of("tiny.fsdp");
  auto set = [&](const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  set("recompute = none", "recompute = block");
  set("micro_batches = 1", "micro_batches = 2");
  set("micro_batch = 8 ", "micro_batch = 4 ");
  FrontendResult fe = load_spec_text("tiny.fsdp", text);
  ASSERT_TRUE(fe.spec) << fe.diagnostics;
  TuneOptions o;
  o.top = 1 << 20;
  o.prune = false;
  const TuneResult r = tune(*fe.spec, hw, o);
  ASSERT_FALSE(r.top.empty());
  ASSERT_TRUE(r.own && r.own->fits);
  const TuneCandidate& w = r.top.front();
  EXPECT_EQ(w.spec.parallel.recompute, Recompute::None)
      << fmt::format("{}", fmt::join(w.changes, ", "));
  // Every candidate with the spec's whole-block units that recomputes pays
  // the same 1.32x (sub-block units recompute per unit and are left out).
  int recomputing = 0;
  for (const TuneCandidate& c : r.all_planned)
    if (c.spec.parallel.recompute == Recompute::Block && c.spec.units == fe.spec->units) {
      ++recomputing;
      EXPECT_NEAR(c.step_ms / w.step_ms, 1.0 + 1703936.0 / 5308416.0, 0.01)
          << fmt::format("{}", fmt::join(c.changes, ", "));
    }
  EXPECT_GT(recomputing, 10);
  EXPECT_NEAR(r.own->step_ms / w.step_ms, 1.0 + 1703936.0 / 5308416.0, 0.01);
}

TEST(Tune, KeepPinsKnobs) {
  const Spec spec = load("tiny.fsdp");
  TuneOptions o;
  o.top = 1 << 20;
  o.prune = false;
  o.keep = {"sharding", "units", "prefetch", "micro_batch"};
  TuneResult r = tune(spec, *find_hardware("cpu"), o);
  for (const TuneCandidate& c : r.all_planned) {
    EXPECT_EQ(c.spec.parallel.sharding, spec.parallel.sharding);
    EXPECT_EQ(c.spec.units, spec.units);
    EXPECT_EQ(c.spec.parallel.prefetch, spec.parallel.prefetch);
    EXPECT_EQ(c.spec.train.micro_batch, spec.train.micro_batch);
  }
  EXPECT_EQ(unknown_knob_error({"units", "prefech"}),
            "--keep prefech: no such knob (did you mean 'prefetch'?); tune's knobs are "
            "'sharding', 'units', 'recompute', 'offload', 'micro_batch', 'reduce', 'prefetch' and "
            "'precision'");
  EXPECT_EQ(unknown_knob_error({"units"}), "");
}

TEST(Tune, WorldsSweepAndBatchChange) {
  const Spec spec = load("tiny.fsdp");
  TuneOptions o;
  o.top = 3;
  o.worlds = {1, 2, 4, 3};
  TuneResult r = tune(spec, *find_hardware("cpu"), o);
  ASSERT_EQ(r.notes.size(), 1u);  // 16 sequences do not split over 3 ranks
  EXPECT_NE(r.notes[0].find("world 3"), std::string::npos) << r.notes[0];
  for (const TuneCandidate& c : r.all_planned)
    EXPECT_EQ(global_batch(c.spec), global_batch(spec));
  o.worlds = {};
  o.allow_batch_change = true;
  o.prune = false;
  o.keep = {"sharding", "units", "prefetch"};
  r = tune(spec, *find_hardware("cpu"), o);
  bool flagged = false;
  for (const TuneCandidate& c : r.all_planned) {
    EXPECT_EQ(c.batch_changed, global_batch(c.spec) != global_batch(spec));
    flagged = flagged || c.batch_changed;
  }
  EXPECT_TRUE(flagged);
}

// tiny in bf16 (params and reduce) with two micro-batches of 4.
Spec tiny_bf16_two_micro_batches() {
  std::string text = text_of("tiny.fsdp");
  for (auto [from, to] : {std::pair{"param = fp32  reduce = fp32", "param = bf16  reduce = bf16"},
                          std::pair{"micro_batches = 1", "micro_batches = 2"},
                          std::pair{"micro_batch = 8 ", "micro_batch = 4 "}}) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, std::string(from).size(), to);
  }
  FrontendResult fe = load_spec_text("tiny.fsdp", text);
  EXPECT_TRUE(fe.spec) << fe.diagnostics;
  return *fe.spec;
}

// What changes the numerics: a dtype; gradients communicated in another
// dtype; micro-batches summed in 16 bits (reduce = last with a 16-bit
// reduce dtype) or no longer. The order of fp32 sums does not.
TEST(Tune, NumericsChangesAreDtypesAndSumsIn16Bits) {
  const Spec fp32 = load("tiny.fsdp");
  Spec s = fp32;
  s.parallel.accumulate = {2, AccumulateReduce::Last};  // fp32 sums in another order
  s.train.micro_batch = 4;
  s.parallel.sharding = Sharding::NoShard;
  s.units = policy_units(s.model, UnitPolicy::EachLinear);
  s.parallel.recompute = Recompute::Block;
  s.parallel.prefetch = {false, BackwardPrefetch::None, 1};
  EXPECT_TRUE(numerics_changes(fp32, s).empty());
  s.parallel.precision.reduce = DType::BF16;
  EXPECT_EQ(numerics_changes(fp32, s),
            (std::vector<std::string>{"reduce dtype bf16, not fp32",
                                      "micro-batch gradients summed in bf16"}));

  const Spec bf16 = tiny_bf16_two_micro_batches();
  Spec last = bf16;
  last.parallel.accumulate.reduce = AccumulateReduce::Last;
  EXPECT_EQ(numerics_changes(bf16, last),
            std::vector<std::string>{"micro-batch gradients summed in bf16"});
  EXPECT_EQ(numerics_changes(last, bf16),
            std::vector<std::string>{"micro-batch gradients no longer summed in bf16"});
  Spec one = last;  // one micro-batch of 8: nothing is summed
  one.parallel.accumulate.micro_batches = 1;
  one.train.micro_batch = 8;
  EXPECT_TRUE(numerics_changes(bf16, one).empty());
  Spec world1 = bf16;  // nothing communicated: the gradients stay fp32
  world1.parallel.world = 1;
  world1.parallel.shard_group = 1;
  EXPECT_EQ(numerics_changes(bf16, world1),
            std::vector<std::string>{"gradients in fp32, not bf16"});
  Spec param = fp32;
  param.parallel.precision.param = DType::FP16;
  param.parallel.precision.master = DType::BF16;
  EXPECT_EQ(
      numerics_changes(fp32, param),
      (std::vector<std::string>{"param dtype fp16, not fp32", "master dtype bf16, not fp32"}));
}

// By default every candidate keeps the spec's numerics, and those held back
// are counted; allow_numerics searches them, and each says how it differs.
TEST(Tune, NumericsKeptUnlessAllowed) {
  const Spec spec = tiny_bf16_two_micro_batches();
  const Hardware hw = *find_hardware("cpu");
  TuneOptions o;
  o.top = 1 << 20;
  o.prune = false;
  const TuneResult kept = tune(spec, hw, o);
  EXPECT_GT(kept.held_numerics, 0);
  EXPECT_EQ(kept.planned, kept.candidates);
  int summed_in_fp32 = 0;
  for (const TuneCandidate& c : kept.all_planned) {
    const std::string what = fmt::format("{}", fmt::join(c.changes, ", "));
    EXPECT_TRUE(c.numerics.empty()) << what;
    EXPECT_EQ(c.spec.parallel.precision, spec.parallel.precision) << what;
    EXPECT_FALSE(c.spec.parallel.accumulate.micro_batches > 1 &&
                 c.spec.parallel.accumulate.reduce == AccumulateReduce::Last)
        << what;
    summed_in_fp32 += c.spec.parallel.accumulate.micro_batches > 1;
  }
  EXPECT_GT(summed_in_fp32, 0);

  o.allow_numerics = true;
  const TuneResult allowed = tune(spec, hw, o);
  EXPECT_EQ(allowed.held_numerics, 0);
  EXPECT_EQ(allowed.candidates, kept.candidates + kept.held_numerics);
  int reduce_fp32 = 0, summed_in_bf16 = 0;
  for (const TuneCandidate& c : allowed.all_planned) {
    const std::string what = fmt::format("{}", fmt::join(c.changes, ", "));
    EXPECT_EQ(c.numerics, numerics_changes(spec, c.spec)) << what;
    reduce_fp32 += c.spec.parallel.precision.reduce == DType::FP32;
    summed_in_bf16 += !c.numerics.empty() && c.spec.parallel.precision.reduce == DType::BF16;
  }
  EXPECT_GT(reduce_fp32, 0);
  EXPECT_GT(summed_in_bf16, 0);
}

// plan's alternatives for a spec that does not fit are tune's candidates: at
// the spec's world and global batch (micro_batch 64 becomes 32 x 2
// micro-batches, not a halved batch or 8x the ranks), fastest per token per
// GPU first, each one that fits when planned again.
TEST(Tune, PlanAlternativesKeepTheWorldAndTheGlobalBatch) {
  Spec spec = load("gpt2-350m.fsdp");
  spec.train.micro_batch = 64;
  const Hardware hw = *find_hardware("a100-40g");
  ASSERT_FALSE(make_plan(spec, hw).fits);
  const std::vector<Alternative> alts = fitting_alternatives(spec, hw);
  ASSERT_FALSE(alts.empty());
  EXPECT_LE(alts.size(), static_cast<size_t>(kAlternatives));
  for (size_t i = 0; i < alts.size(); ++i) {
    const Alternative& a = alts[i];
    EXPECT_FALSE(a.batch_changed) << a.change;
    EXPECT_EQ(a.global_batch, global_batch(spec)) << a.change;
    EXPECT_EQ(a.change.find("world"), std::string::npos) << a.change;
    EXPECT_NE(a.change.find("micro_batches = "), std::string::npos) << a.change;
    if (i > 0) {
      EXPECT_GE(alts[i - 1].tokens_per_s_per_gpu, a.tokens_per_s_per_gpu) << a.change;
    }
  }
  // The first matches tune's winner with the same knobs kept.
  TuneOptions o;
  o.top = 1;
  o.keep = {"precision", "prefetch"};
  const TuneResult r = tune(spec, hw, o);
  ASSERT_EQ(r.top.size(), 1u);
  EXPECT_DOUBLE_EQ(alts[0].step_ms, r.top[0].step_ms);
  const Plan again = make_plan(r.top[0].spec, hw);
  EXPECT_TRUE(again.fits);
  EXPECT_EQ(again.memory->device_arena_bytes, alts[0].peak_bytes);
}

// The rewrite keeps comments and layout and reads back as the target.
TEST(Tune, RewriteChangesOnlyTheKnobs) {
  const std::string name = spec_path("gpt2-1.5b.fsdp");
  const std::string text = text_of("gpt2-1.5b.fsdp");
  const Spec from = load("gpt2-1.5b.fsdp");
  Spec to = from;
  ParallelSpec& p = to.parallel;
  p.sharding = Sharding::FullShard;
  p.shard_group = p.world;
  p.precision.reduce = DType::BF16;
  p.prefetch = {false, BackwardPrefetch::Post, 3};
  p.recompute = Recompute::Block;
  p.offload = Offload::Cpu;
  p.offload_activations = true;
  p.accumulate = {2, AccumulateReduce::Last};
  to.train.micro_batch = 16;
  to.units = policy_units(from.model, UnitPolicy::EachLinear);
  const std::string out = rewrite_spec_text(name, text, from, to);
  FrontendResult back = load_spec_text(name, out);
  ASSERT_TRUE(back.spec) << back.diagnostics << out;
  EXPECT_EQ(back.spec->parallel, to.parallel);
  EXPECT_EQ(back.spec->train.micro_batch, 16);
  EXPECT_EQ(back.spec->model, from.model);
  EXPECT_EQ(back.spec->units, to.units);
  // Comments and untouched lines stay; shard_group went with hybrid sharding.
  EXPECT_NE(out.find("# Two nodes of eight GPUs with hybrid sharding"), std::string::npos);
  EXPECT_NE(out.find("  ranks_per_node = 8\n"), std::string::npos);
  EXPECT_NE(out.find("  sharding       = full_shard\n"), std::string::npos) << out;
  EXPECT_EQ(out.find("shard_group"), std::string::npos) << out;
  EXPECT_NE(out.find("  checkpoint(every = 1000"), std::string::npos);
  // No change: the text as it was.
  EXPECT_EQ(rewrite_spec_text(name, text, from, from), text);
}

TEST(Tune, RewriteAddsWhatTheSpecLeftOut) {
  // gpt-1t has no accumulate and writes offload as a block; tiny writes offload = none.
  for (const char* file : {"gpt-1t.fsdp", "tiny.fsdp"}) {
    const std::string name = spec_path(file);
    const Spec from = load(file);
    Spec to = from;
    to.parallel.accumulate = {2, AccumulateReduce::Last};
    to.train.micro_batch = from.train.micro_batch / 2;
    to.parallel.offload_activations = !from.parallel.offload_activations;
    to.parallel.recompute = Recompute::Block;
    to.parallel.sharding = Sharding::HybridShard;
    to.parallel.shard_group = 2;
    const std::string out = rewrite_spec_text(name, text_of(file), from, to);
    FrontendResult back = load_spec_text(name, out);
    ASSERT_TRUE(back.spec) << back.diagnostics << out;
    EXPECT_EQ(back.spec->parallel, to.parallel) << out;
    EXPECT_EQ(back.spec->train.micro_batch, to.train.micro_batch);
  }
}

TEST(Tune, RewriteChangesTheUnitsPolicy) {
  const std::string name = spec_path("tiny.fsdp");
  const Spec from = load("tiny.fsdp");
  TuneOptions o;
  o.top = 1 << 20;
  o.prune = false;
  o.keep = {"sharding", "recompute", "offload", "micro_batch", "reduce", "prefetch"};
  TuneResult r = tune(from, *find_hardware("cpu"), o);
  int units_changed = 0;
  for (const TuneCandidate& c : r.all_planned) {
    if (c.spec.units == from.units) continue;
    ++units_changed;
    const std::string out = rewrite_spec_text(name, text_of("tiny.fsdp"), from, c.spec);
    FrontendResult back = load_spec_text(name, out);
    ASSERT_TRUE(back.spec) << back.diagnostics << out;
    EXPECT_EQ(back.spec->units, c.spec.units) << out;
    EXPECT_NE(out.find("# one wrap unit per transformer block"), std::string::npos) << out;
  }
  EXPECT_GE(units_changed, 2);  // each linear, group 2 blocks
}

}  // namespace
}  // namespace fsdpgen
