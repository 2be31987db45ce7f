// TuneSpace: each knob's choices and the words for a configuration
// (codegen/planner/TuneSpace.h).
#include "codegen/planner/TuneSpace.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/planner/Schedule.h"
#include "dsl/Units.h"

namespace fsdpgen {
namespace {

std::string sharding_text(const ParallelSpec& p) {
  return is_hybrid(p.sharding)
             ? fmt::format("sharding = {} (shard_group = {})", to_string(p.sharding), p.shard_group)
             : fmt::format("sharding = {}", to_string(p.sharding));
}

std::string offload_text(const ParallelSpec& p) {
  return p.offload_activations
             ? fmt::format("offload {{ params = {}  activations = cpu }}", to_string(p.offload))
             : fmt::format("offload = {}", to_string(p.offload));
}

// The 16-bit dtype micro-batch gradients are summed in, or nullopt (fp32,
// or a single micro-batch): with reduce = last the unsharded gradients
// accumulate in the dtype they are communicated in.
std::optional<DType> sums_in_16_bits(const ParallelSpec& p) {
  const DType grads = unsharded_grad_dtype(p);
  if (p.accumulate.micro_batches == 1 || p.accumulate.reduce != AccumulateReduce::Last ||
      dtype_bytes(grads) == 4)
    return std::nullopt;
  return grads;
}

}  // namespace

bool knob_kept(const TuneOptions& o, std::string_view knob) {
  return std::find(o.keep.begin(), o.keep.end(), knob) != o.keep.end();
}

std::string units_text(const UnitsSpec& u) {
  switch (u.policy) {
    case UnitPolicy::EachBlock:
      return "each block";
    case UnitPolicy::EachLinear:
      return "each linear";
    case UnitPolicy::Group:
      return fmt::format("group {} blocks", u.group);
    case UnitPolicy::MinParams:
      return fmt::format("min_params {}", u.min_params);
    case UnitPolicy::Explicit:
      break;
  }
  return "explicit units";
}

std::vector<UnitsSpec> units_choices(const Spec& spec, const TuneOptions& o) {
  std::vector<UnitsSpec> out = {spec.units};
  if (knob_kept(o, "units") || !spec.units.explicit_units.empty()) return out;
  auto add = [&](UnitsSpec u) {
    if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(std::move(u));
  };
  add(policy_units(spec.model, UnitPolicy::EachBlock));
  add(policy_units(spec.model, UnitPolicy::EachLinear));
  for (int64_t k = 2; k < spec.model.layers; k *= 2)
    add(group_units(spec.model, k));
  return out;
}

std::vector<ShardingChoice> sharding_choices(const Spec& spec, int64_t world, int64_t per_node,
                                             const TuneOptions& o) {
  const ParallelSpec& p = spec.parallel;
  if (knob_kept(o, "sharding")) {
    int64_t g = is_hybrid(p.sharding) ? p.shard_group : non_hybrid_shard_group(p.sharding, world);
    if (world % g != 0) return {};
    return {{p.sharding, g}};
  }
  std::vector<ShardingChoice> out;
  for (Sharding s : {Sharding::FullShard, Sharding::ShardGradOp, Sharding::NoShard})
    out.push_back({s, non_hybrid_shard_group(s, world)});
  for (int64_t g = 2; g < world; ++g)
    if (world % g == 0 && (g % per_node == 0 || per_node % g == 0))
      for (Sharding s : {Sharding::HybridShard, Sharding::HybridShardZero2})
        out.push_back({s, g});
  return out;
}

std::vector<MemoryChoice> memory_choices(const Spec& spec, const TuneOptions& o) {
  const ParallelSpec& p = spec.parallel;
  std::vector<MemoryChoice> out;
  for (Recompute r : {Recompute::None, Recompute::Block})
    for (Offload off : {Offload::None, Offload::Cpu})
      for (bool acts : {false, true}) {
        if (acts && r != Recompute::Block) continue;
        if (knob_kept(o, "recompute") && r != p.recompute) continue;
        if (knob_kept(o, "offload") && (off != p.offload || acts != p.offload_activations))
          continue;
        out.push_back({r, off, acts});
      }
  return out;
}

std::vector<BatchChoice> batch_choices(const Spec& spec, int64_t per_rank, const TuneOptions& o) {
  const int64_t b0 = spec.train.micro_batch, m0 = spec.parallel.accumulate.micro_batches;
  if (knob_kept(o, "micro_batch")) return {{b0, m0}};
  std::vector<BatchChoice> out;
  for (int64_t b = 1; b <= per_rank; ++b)
    if (per_rank % b == 0) out.push_back({b, per_rank / b});
  if (o.allow_batch_change)
    for (int64_t b = 1; b <= 2 * b0 * m0; b *= 2)
      for (int64_t m = 1; b * m <= 2 * b0 * m0; m *= 2)
        if (b * m != per_rank) out.push_back({b, m});
  return out;
}

std::vector<PrefetchSpec> prefetch_choices(const Spec& spec, const TuneOptions& o) {
  const PrefetchSpec own = spec.parallel.prefetch;
  std::vector<PrefetchSpec> out = {own};
  if (knob_kept(o, "prefetch")) return out;
  auto add = [&](PrefetchSpec f) {
    if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  };
  add({false, BackwardPrefetch::None, 1});
  for (bool fwd : {true, false})
    for (BackwardPrefetch b :
         {BackwardPrefetch::Pre, BackwardPrefetch::Post, BackwardPrefetch::None})
      if (fwd || b != BackwardPrefetch::None)
        for (int64_t k : {int64_t{2}, int64_t{3}})
          add({fwd, b, k});
  return out;
}

std::vector<DType> reduce_choices(const Spec& spec, const TuneOptions& o) {
  const PrecisionSpec& pr = spec.parallel.precision;
  std::vector<DType> out = {pr.reduce};
  if (knob_kept(o, "precision")) return out;
  for (DType d : {pr.param, DType::FP32})
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  return out;
}

std::vector<std::string> changes_between(const Spec& from, const Spec& to) {
  const ParallelSpec &a = from.parallel, &b = to.parallel;
  std::vector<std::string> out;
  if (a.world != b.world) out.push_back(fmt::format("world = {}", b.world));
  if (a.sharding != b.sharding || (is_hybrid(b.sharding) && a.shard_group != b.shard_group))
    out.push_back(sharding_text(b));
  if (from.units != to.units) out.push_back(fmt::format("units {{ {} }}", units_text(to.units)));
  if (a.recompute != b.recompute)
    out.push_back(fmt::format("recompute = {}", to_string(b.recompute)));
  if (a.offload != b.offload || a.offload_activations != b.offload_activations)
    out.push_back(offload_text(b));
  if (from.train.micro_batch != to.train.micro_batch)
    out.push_back(fmt::format("micro_batch = {}", to.train.micro_batch));
  if (a.accumulate.micro_batches != b.accumulate.micro_batches)
    out.push_back(fmt::format("micro_batches = {}", b.accumulate.micro_batches));
  if (a.accumulate.reduce != b.accumulate.reduce)
    out.push_back(fmt::format("accumulate reduce = {}", to_string(b.accumulate.reduce)));
  if (a.precision.reduce != b.precision.reduce)
    out.push_back(fmt::format("precision reduce = {}", to_string(b.precision.reduce)));
  const PrefetchSpec &f = a.prefetch, &g = b.prefetch;
  std::vector<std::string> pf;
  if (f.forward != g.forward) pf.push_back(fmt::format("forward = {}", g.forward));
  if (f.backward != g.backward) pf.push_back(fmt::format("backward = {}", to_string(g.backward)));
  if (f.max_inflight != g.max_inflight)
    pf.push_back(fmt::format("max_inflight = {}", g.max_inflight));
  if (!pf.empty()) out.push_back(fmt::format("prefetch {{ {} }}", fmt::join(pf, "  ")));
  return out;
}

std::vector<std::string> numerics_changes(const Spec& from, const Spec& to) {
  const PrecisionSpec &a = from.parallel.precision, &b = to.parallel.precision;
  std::vector<std::string> out;
  for (auto [name, was, is] :
       {std::tuple{"param", a.param, b.param}, std::tuple{"reduce", a.reduce, b.reduce},
        std::tuple{"master", a.master, b.master}})
    if (was != is)
      out.push_back(fmt::format("{} dtype {}, not {}", name, to_string(is), to_string(was)));
  const DType grads_was = unsharded_grad_dtype(from.parallel),
              grads_is = unsharded_grad_dtype(to.parallel);
  if (out.empty() && grads_was != grads_is)
    out.push_back(
        fmt::format("gradients in {}, not {}", to_string(grads_is), to_string(grads_was)));
  const std::optional<DType> sum_was = sums_in_16_bits(from.parallel),
                             sum_is = sums_in_16_bits(to.parallel);
  if (sum_is && sum_is != sum_was)
    out.push_back(fmt::format("micro-batch gradients summed in {}", to_string(*sum_is)));
  else if (sum_was && !sum_is)
    out.push_back(fmt::format("micro-batch gradients no longer summed in {}", to_string(*sum_was)));
  return out;
}

bool same_configuration(const Spec& a, const Spec& b) {
  return a.parallel == b.parallel && a.units == b.units &&
         a.train.micro_batch == b.train.micro_batch;
}

}  // namespace fsdpgen
