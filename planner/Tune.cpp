// Tune: the candidate space, its lower bounds, the pruned search, and the
// spec text rewrite that writes the winner.
#include "planner/Tune.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "dsl/Ast.h"
#include "dsl/Diagnostics.h"
#include "dsl/Fields.h"
#include "dsl/Frontend.h"
#include "dsl/Parser.h"
#include "dsl/Units.h"
#include "planner/Activations.h"
#include "planner/Cost.h"
#include "planner/Fit.h"
#include "planner/Lower.h"
#include "planner/Memory.h"
#include "planner/Schedule.h"
#include "suggest/Suggest.h"

namespace fsdpgen {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool kept(const TuneOptions& o, std::string_view knob) {
  return std::find(o.keep.begin(), o.keep.end(), knob) != o.keep.end();
}

// The spec language's words for a units policy: "each linear", "group 2 blocks".
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

// Each block, each linear and group k blocks (k a power of two below the
// layers), the spec's own first. A spec with explicit units keeps them.
std::vector<UnitsSpec> units_choices(const Spec& spec, const TuneOptions& o) {
  std::vector<UnitsSpec> out = {spec.units};
  if (kept(o, "units") || !spec.units.explicit_units.empty()) return out;
  auto add = [&](UnitsSpec u) {
    if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(std::move(u));
  };
  add(policy_units(spec.model, UnitPolicy::EachBlock));
  add(policy_units(spec.model, UnitPolicy::EachLinear));
  for (int64_t k = 2; k < spec.model.layers; k *= 2)
    add(group_units(spec.model, k));
  return out;
}

struct ShardingChoice {
  Sharding sharding;
  int64_t group;
};

// Every strategy; hybrid ones over each shard group 1 < g < world that
// divides the world and either divides ranks_per_node or is a multiple of it.
std::vector<ShardingChoice> sharding_choices(const Spec& spec, int64_t world, int64_t per_node,
                                             const TuneOptions& o) {
  const ParallelSpec& p = spec.parallel;
  if (kept(o, "sharding")) {
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

struct MemoryChoice {
  Recompute recompute;
  Offload offload;
  bool offload_activations;
};

std::vector<MemoryChoice> memory_choices(const Spec& spec, const TuneOptions& o) {
  const ParallelSpec& p = spec.parallel;
  std::vector<MemoryChoice> out;
  for (Recompute r : {Recompute::None, Recompute::Block})
    for (Offload off : {Offload::None, Offload::Cpu})
      for (bool acts : {false, true}) {
        if (acts && r != Recompute::Block) continue;
        if (kept(o, "recompute") && r != p.recompute) continue;
        if (kept(o, "offload") && (off != p.offload || acts != p.offload_activations)) continue;
        out.push_back({r, off, acts});
      }
  return out;
}

struct BatchChoice {
  int64_t micro_batch;
  int64_t micro_batches;
};

// micro_batch x micro_batches = `per_rank`: every divisor. With batch
// changes allowed, also powers of two up to twice the spec's per-rank batch.
std::vector<BatchChoice> batch_choices(const Spec& spec, int64_t per_rank, const TuneOptions& o) {
  const int64_t b0 = spec.train.micro_batch, m0 = spec.parallel.accumulate.micro_batches;
  if (kept(o, "micro_batch")) return {{b0, m0}};
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
  if (kept(o, "prefetch")) return out;
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

// The reduce dtypes that keep the math: the spec's, the param dtype's and fp32.
std::vector<DType> reduce_choices(const Spec& spec, const TuneOptions& o) {
  const PrecisionSpec& pr = spec.parallel.precision;
  std::vector<DType> out = {pr.reduce};
  if (kept(o, "precision")) return out;
  for (DType d : {pr.param, DType::FP32})
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  return out;
}

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

// What `to` changes of `from`, in the spec language's words.
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

// Milliseconds per token each rank trains: `ms` over the step's tokens per
// rank. What the search ranks by: at a fixed world and global batch, the
// step's order; where the batch changes, not fooled by a smaller one.
double per_token(const Spec& s, double ms) {
  return ms / static_cast<double>(s.train.micro_batch * s.parallel.accumulate.micro_batches *
                                  s.model.context);
}

bool same_configuration(const Spec& a, const Spec& b) {
  return a.parallel == b.parallel && a.units == b.units &&
         a.train.micro_batch == b.train.micro_batch;
}

// Lower bounds on a candidate's arenas, from its units alone: the
// persistent state (shards, master weights, optimizer state; on the host
// when offloaded, with the gradient shards), plus the larger of what one
// segment's backward holds (its unit's gathered parameters and unsharded
// gradients, the activations a recompute rebuilt, the backward scratch)
// and what lives at the loss (the root's parameters, or every
// unit's where they stay gathered through backward, the micro-batch's saved
// activations, logits and inputs).
struct MemoryBound {
  int64_t device = 0;
  int64_t host = 0;
};

MemoryBound memory_bound(const Units& u, const Spec& spec, const Hardware& hw) {
  const ParallelSpec& p = spec.parallel;
  const bool offload = p.offload == Offload::Cpu;
  const bool gathers = p.shard_group > 1 || offload;
  const int64_t pbytes = dtype_bytes(p.precision.param), mbytes = dtype_bytes(p.precision.master);
  const int64_t rbytes = dtype_bytes(unsharded_grad_dtype(p));
  const OptimizerSpec& opt = spec.train.optimizer;
  const int64_t states = opt.kind == OptimizerKind::AdamW ? 2 : (opt.momentum > 0 ? 1 : 0);
  MemoryBound m;
  for (const FlatUnit& f : u.units) {
    if (f.padded_elems == 0) continue;
    int64_t state = f.shard_elems * (pbytes + states * mbytes);
    if (p.precision.master != p.precision.param) state += f.shard_elems * mbytes;
    if (offload)
      m.host += state + f.shard_elems * dtype_bytes(grad_shard_dtype(p));
    else
      m.device += state;
  }
  const ScheduleOptions so = schedule_options_for(hw, spec);
  const ActivationShape act{spec.train.micro_batch * spec.model.context, pbytes,
                            so.flash_attention};
  const bool recompute = p.recompute == Recompute::Block;
  // A segment's backward: its unit gathered, its gradients, the activations
  // a recompute rebuilt for its group, and the gradient of the activations.
  int64_t backward = 0;
  for (const Segment& s : u.segments) {
    const FlatUnit& f = u.units[s.unit];
    int64_t live = f.padded_elems * ((gathers ? pbytes : 0) + rbytes);
    if (recompute) live += group_saved_bytes(u, s.group, act);
    backward = std::max(backward, live);
  }
  backward += backward_scratch_bytes(spec.model, act);
  int64_t workspace = so.gemm_workspace_bytes;
  if (so.cudnn_attention_workspace)
    workspace = std::max(workspace, cudnn_attention_workspace_bytes(spec.model, act));
  m.device += workspace + rope_tables_bytes(spec.model);
  int64_t at_loss = logits_bytes(spec.model, act) + inputs_bytes(act);
  // Strategies that keep units gathered from forward to backward hold them
  // all at the loss; the others hold at least the root.
  if (gathers && keeps_params_through_backward(p.sharding))
    for (const FlatUnit& f : u.units)
      at_loss += f.padded_elems * pbytes;
  else if (gathers && !u.units.empty())
    at_loss += u.units[0].padded_elems * pbytes;
  for (size_t g = 0; g < u.segments.size(); ++g) {
    const Segment& s = u.segments[g];
    if (s.group != static_cast<int>(g)) continue;
    const bool block = s.layers.front().kind == LayerId::Kind::Block;
    if (recompute && block)
      at_loss += p.offload_activations ? 0 : segment_input_bytes(spec.model, act);
    else
      at_loss += group_saved_bytes(u, static_cast<int>(g), act);
  }
  m.device += std::max(backward, at_loss);
  return m;
}

bool bound_fits(const MemoryBound& m, const Hardware& hw) {
  if (!hw.gpu) return m.device + m.host <= usable_bytes(hw);
  return m.device <= usable_bytes(hw) && m.host <= usable_host_bytes(hw);
}

// The busiest stream's time when every op runs alone: a lower bound on the
// step (ops on a stream run one after another; a shared link only slows them).
// With `compute_only`, the compute stream's forward, recompute and backward.
double stream_bound_ms(const Schedule& s, const Hardware& hw, bool compute_only) {
  std::vector<double> busy(kStreamNames.size(), 0.0);
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::Free) continue;
    const bool layer =
        op.kind == OpKind::Forward || op.kind == OpKind::Recompute || op.kind == OpKind::Backward;
    if (compute_only && !layer) continue;
    busy[static_cast<int>(op.stream)] += op_seconds(s, op, hw);
  }
  return 1e3 * *std::max_element(busy.begin(), busy.end());
}

// One point of the space without its prefetch settings (a "structure"):
// every prefetch variant shares its units, memory bound and time bounds.
struct Structure {
  Spec spec;
  const Units* units = nullptr;
  MemoryBound memory;
  double compute_bound_ms = 0;
};

class Search {
 public:
  Search(const Spec& spec, const Hardware& hw, const TuneOptions& o)
      : spec_(spec), hw_(hw), o_(o), prefetch_(prefetch_choices(spec, o)) {}

  TuneResult run() {
    Clock::time_point t0 = Clock::now();
    TuneCandidate own = plan(spec_, schedule_of(spec_, units_for(spec_)));
    own.own = true;
    r_.own = own;
    r_.source = source_;
    record(own);
    std::vector<Structure> structures = enumerate();
    r_.bound_s = seconds_since(t0) - plan_s_;
    const int64_t variants = static_cast<int64_t>(prefetch_.size());
    for (size_t i = 0; i < structures.size(); ++i) {
      Structure& st = structures[i];
      if (o_.prune && per_token(st.spec, st.compute_bound_ms) >= slowest_top()) {
        for (size_t j = i; j < structures.size(); ++j)
          r_.pruned_time += variants - own_in(structures[j].spec);
        break;
      }
      Clock::time_point b = Clock::now();
      const Units& u = *st.units;
      const Schedule own_prefetch = schedule_of(st.spec, u);
      const double bound = stream_bound_ms(own_prefetch, hw_, false);
      r_.bound_s += seconds_since(b);
      for (const PrefetchSpec& f : prefetch_) {
        Spec s = st.spec;
        s.parallel.prefetch = f;
        if (same_configuration(s, spec_)) continue;
        if (o_.prune && per_token(s, bound) >= slowest_top()) {
          ++r_.pruned_time;
          continue;
        }
        b = Clock::now();
        std::optional<Schedule> other;
        if (f != st.spec.parallel.prefetch) other = schedule_of(s, u);
        const Schedule& sched = other ? *other : own_prefetch;
        const LivePeaks live = live_peaks(sched);
        // Over the room at its live peak, it cannot fit: it is planned in
        // full only when it is the fastest that does not fit so far.
        std::optional<Timeline> timeline;
        if (o_.prune && !bound_fits({live.device_bytes, live.host_bytes}, hw_))
          timeline = predict(sched, hw_);
        r_.bound_s += seconds_since(b);
        if (timeline && r_.best_unfit &&
            per_token(s, timeline->step_ms) >= r_.best_unfit->ms_per_token) {
          ++r_.pruned_memory;
          continue;
        }
        TuneCandidate c = plan(s, sched, std::move(timeline));
        c.device_lower_bound_bytes = st.memory.device;
        c.device_live_bytes = live.device_bytes;
        c.host_live_bytes = live.host_bytes;
        c.step_lower_bound_ms = bound;
        record(std::move(c));
      }
    }
    finish();
    r_.plan_s = plan_s_;
    return std::move(r_);
  }

 private:
  // 1 when a prefetch variant of structure `s` is the spec's own
  // configuration, which is planned first and counts once.
  int own_in(const Spec& s) const {
    Spec v = s;
    v.parallel.prefetch = spec_.parallel.prefetch;
    return same_configuration(v, spec_) ? 1 : 0;
  }

  const Units& units_for(const Spec& s) {
    auto key = std::make_tuple(s.parallel.world, s.parallel.shard_group, print_key(s.units));
    auto it = lowered_.find(key);
    if (it == lowered_.end()) it = lowered_.emplace(key, lower(s)).first;
    return it->second;
  }
  static std::string print_key(const UnitsSpec& u) {
    return fmt::format("{}:{}:{}:{}", static_cast<int>(u.policy), u.group, u.min_params,
                       u.units.size());
  }

  // Every valid structure whose memory bound fits, fastest compute bound first.
  std::vector<Structure> enumerate() {
    const ParallelSpec& p = spec_.parallel;
    const int64_t global = p.world * spec_.train.micro_batch * p.accumulate.micro_batches;
    std::vector<int64_t> worlds = o_.worlds.empty() ? std::vector<int64_t>{p.world} : o_.worlds;
    const std::vector<UnitsSpec> units = units_choices(spec_, o_);
    const std::vector<MemoryChoice> memory = memory_choices(spec_, o_);
    const std::vector<DType> reduces = reduce_choices(spec_, o_);
    const int64_t variants = static_cast<int64_t>(prefetch_.size());
    std::vector<Structure> out;
    for (int64_t world : worlds) {
      const int64_t per_node = std::min(p.ranks_per_node, world);
      if (world % per_node != 0) {
        r_.notes.push_back(
            fmt::format("world {}: ranks_per_node {} does not divide it", world, p.ranks_per_node));
        continue;
      }
      if (global % world != 0 && !o_.allow_batch_change) {
        r_.notes.push_back(
            fmt::format("world {}: the global batch of {} sequences does not split over it "
                        "(--allow-batch-change "
                        "changes the batch)",
                        world, global));
        continue;
      }
      const int64_t per_rank = std::max<int64_t>(1, global / world);
      for (const ShardingChoice& sh : sharding_choices(spec_, world, per_node, o_))
        for (const UnitsSpec& un : units)
          for (const MemoryChoice& mc : memory)
            for (const BatchChoice& bc : batch_choices(spec_, per_rank, o_))
              for (AccumulateReduce ar : {AccumulateReduce::Every, AccumulateReduce::Last})
                for (DType rd : reduces) {
                  if (bc.micro_batches == 1 && ar != p.accumulate.reduce) continue;
                  if (bc.micro_batches > 1 && kept(o_, "reduce") && ar != p.accumulate.reduce)
                    continue;
                  Spec s = spec_;
                  ParallelSpec& q = s.parallel;
                  q.world = world;
                  q.ranks_per_node = per_node;
                  q.sharding = sh.sharding;
                  q.shard_group = sh.group;
                  s.units = un;
                  q.recompute = mc.recompute;
                  q.offload = mc.offload;
                  q.offload_activations = mc.offload_activations;
                  s.train.micro_batch = bc.micro_batch;
                  q.accumulate = {bc.micro_batches, ar};
                  q.precision.reduce = rd;
                  if (q.offload == Offload::Cpu && q.sharding == Sharding::NoShard) continue;
                  if (!activations_size_error(s, schedule_options_for(hw_, s).flash_attention)
                           .empty())
                    continue;
                  const Units& u = units_for(s);
                  if (!shardable(u, q.shard_group)) continue;
                  r_.candidates += variants - own_in(s);
                  Structure st{s, &u, memory_bound(u, s, hw_), 0};
                  if (o_.prune && !bound_fits(st.memory, hw_)) {
                    r_.pruned_memory += variants - own_in(s);
                    continue;
                  }
                  st.compute_bound_ms = compute_bound(st);
                  out.push_back(std::move(st));
                }
    }
    std::stable_sort(out.begin(), out.end(), [](const Structure& a, const Structure& b) {
      return per_token(a.spec, a.compute_bound_ms) < per_token(b.spec, b.compute_bound_ms);
    });
    ++r_.candidates;  // the own configuration
    return out;
  }

  // Every unit with parameters has at least one per rank of its shard group
  // (check_shardable's rule).
  static bool shardable(const Units& u, int64_t group) {
    for (const FlatUnit& f : u.units)
      if (f.param_elems > 0 && f.param_elems < group) return false;
    return true;
  }

  // The compute stream's layer passes, shared by every structure with the
  // same units, micro-batches and recompute.
  double compute_bound(const Structure& st) {
    const ParallelSpec& q = st.spec.parallel;
    auto key = std::make_tuple(print_key(st.spec.units), q.world, st.spec.train.micro_batch,
                               q.accumulate.micro_batches, static_cast<int>(q.recompute));
    auto it = compute_bounds_.find(key);
    if (it != compute_bounds_.end()) return it->second;
    const double ms = stream_bound_ms(schedule_of(st.spec, *st.units), hw_, true);
    compute_bounds_.emplace(key, ms);
    return ms;
  }

  Schedule schedule_of(const Spec& s, const Units& lowered) const {
    Units u = lowered;
    u.spec = s;
    return build_schedule(u, schedule_options_for(hw_, s));
  }

  // `predicted`: predict(sched, hw_) where the search already has it.
  TuneCandidate plan(const Spec& s, const Schedule& sched,
                     std::optional<Timeline> predicted = std::nullopt) {
    Clock::time_point t = Clock::now();
    const MemoryPlan m = plan_memory(sched);
    const Timeline tl = predicted ? std::move(*predicted) : predict(sched, hw_);
    TuneCandidate c;
    c.spec = s;
    c.changes = changes_between(spec_, s);
    const ParallelSpec &a = spec_.parallel, &b = s.parallel;
    c.batch_changed = a.world * spec_.train.micro_batch * a.accumulate.micro_batches !=
                      b.world * s.train.micro_batch * b.accumulate.micro_batches;
    c.fits = plan_fits(m, hw_);
    c.device_bytes = m.device_arena_bytes;
    c.host_bytes = m.host_arena_bytes;
    c.step_ms = tl.step_ms;
    c.ms_per_token = per_token(s, tl.step_ms);
    c.tokens_per_s_per_gpu = tl.tokens_per_s / static_cast<double>(b.world);
    c.mfu = tl.mfu;
    c.exposed_comm_ms = tl.exposed_comm_ms;
    c.ops_estimated = hw_.profile ? tl.ops_estimated : 0;
    if (source_.empty()) source_ = timeline_source(tl);
    ++r_.planned;
    r_.fitting += c.fits;
    plan_s_ += seconds_since(t);
    return c;
  }

  double slowest_top() const {
    return static_cast<int64_t>(top_.size()) < o_.top ? std::numeric_limits<double>::infinity()
                                                      : top_.back().ms_per_token;
  }

  void record(TuneCandidate c) {
    if (c.fits) {
      auto at =
          std::upper_bound(top_.begin(), top_.end(), c.ms_per_token,
                           [](double ms, const TuneCandidate& x) { return ms < x.ms_per_token; });
      top_.insert(at, c);
      if (static_cast<int64_t>(top_.size()) > o_.top) top_.pop_back();
    } else if (!r_.best_unfit || c.ms_per_token < r_.best_unfit->ms_per_token) {
      r_.best_unfit = c;
    }
    r_.all_planned.push_back(std::move(c));
  }

  void finish() {
    r_.top = top_;
    for (size_t i = 0; i < r_.top.size(); ++i)
      if (r_.top[i].own || same_configuration(r_.top[i].spec, spec_)) {
        r_.top[i].own = true;
        r_.own_rank = static_cast<int>(i + 1);
      }
    std::vector<const TuneCandidate*> fitting;
    for (const TuneCandidate& c : r_.all_planned)
      if (c.fits) fitting.push_back(&c);
    std::stable_sort(fitting.begin(), fitting.end(), [](const auto* a, const auto* b) {
      return a->ms_per_token != b->ms_per_token ? a->ms_per_token < b->ms_per_token
                                                : a->device_bytes < b->device_bytes;
    });
    int64_t smallest = std::numeric_limits<int64_t>::max();
    for (const TuneCandidate* c : fitting)
      if (c->device_bytes < smallest) {
        smallest = c->device_bytes;
        r_.pareto.push_back(*c);
      }
  }

  const Spec& spec_;
  const Hardware& hw_;
  const TuneOptions& o_;
  const std::vector<PrefetchSpec> prefetch_;
  std::map<std::tuple<int64_t, int64_t, std::string>, Units> lowered_;
  std::map<std::tuple<std::string, int64_t, int64_t, int64_t, int>, double> compute_bounds_;
  std::vector<TuneCandidate> top_;
  std::string source_;
  double plan_s_ = 0;
  TuneResult r_;
};

// Spec text edits: byte ranges of the original text replaced, applied back
// to front.
struct Edit {
  uint32_t begin = 0, end = 0;
  std::string text;
};

class Rewriter {
 public:
  Rewriter(const std::string& name, const std::string& text)
      : file_(name, text), diags_(file_), tree_(parse(file_, diags_)), text_(text) {}

  // key = value in a section (inserted before its closing brace when absent).
  void set(std::string_view section, std::string_view key, const std::string& value) {
    ast::Section& sec = section_of(section);
    if (const ast::Entry* e = find(sec.entries, key); e && e->kind == ast::Entry::Kind::Assign) {
      edits_.push_back({e->value.span.begin, e->value.span.end, value});
      return;
    } else if (e) {
      edits_.push_back({e->span.begin, e->span.end, fmt::format("{} = {}", key, value)});
      return;
    }
    insert_line(sec, fmt::format("{} = {}", key, value));
  }

  // key { k = v ... } in a section: the values given set, others kept as written.
  void set_block(std::string_view section, std::string_view key,
                 const std::vector<std::pair<std::string, std::string>>& values) {
    ast::Section& sec = section_of(section);
    const ast::Entry* e = find(sec.entries, key);
    if (!e) {
      std::string body;
      for (const auto& [k, v] : values)
        body += fmt::format("{} = {}  ", k, v);
      insert_line(sec, fmt::format("{} {{ {}}}", key, body));
      return;
    }
    if (e->kind == ast::Entry::Kind::Block) {
      bool all_present = true;
      for (const auto& [k, v] : values)
        all_present = all_present && find(e->entries, k) != nullptr;
      if (all_present) {
        for (const auto& [k, v] : values) {
          const ast::Entry* sub = find(e->entries, k);
          edits_.push_back({sub->value.span.begin, sub->value.span.end, v});
        }
        return;
      }
    }
    // Written another way (offload = cpu), or missing a key: the entry anew,
    // keeping the keys it had that are not set here.
    std::string body;
    if (e->kind == ast::Entry::Kind::Block)
      for (const ast::Entry& sub : e->entries) {
        bool replaced = false;
        for (const auto& [k, v] : values)
          replaced = replaced || sub.key == k;
        if (!replaced) body += std::string(file_.slice(sub.span)) + "  ";
      }
    for (const auto& [k, v] : values)
      body += fmt::format("{} = {}  ", k, v);
    edits_.push_back({e->span.begin, e->span.end, fmt::format("{} {{ {}}}", key, body)});
  }

  // Removes an entry with its line when nothing else is on it.
  void remove(std::string_view section, std::string_view key) {
    ast::Section& sec = section_of(section);
    const ast::Entry* e = find(sec.entries, key);
    if (!e) return;
    uint32_t b = e->span.begin, end = e->span.end;
    while (b > 0 && (text_[b - 1] == ' ' || text_[b - 1] == '\t'))
      --b;
    uint32_t after = end;
    while (after < text_.size() && (text_[after] == ' ' || text_[after] == '\t'))
      ++after;
    if ((b == 0 || text_[b - 1] == '\n') && after < text_.size() &&
        (text_[after] == '\n' || text_[after] == '#')) {
      while (after < text_.size() && text_[after] != '\n')
        ++after;
      edits_.push_back({b, std::min<uint32_t>(after + 1, text_.size()), ""});
    } else {
      edits_.push_back({e->span.begin, e->span.end, ""});
    }
  }

  // The units section's policy line replaced (explicit units stay).
  void set_units(const std::string& policy) {
    for (ast::Section& sec : tree_.sections) {
      if (sec.kind != "units") continue;
      bool done = false;
      for (const ast::UnitItem& item : sec.units) {
        if (item.kind == ast::UnitItem::Kind::Explicit) continue;
        edits_.push_back({item.span.begin, item.span.end, done ? "" : policy});
        done = true;
      }
      if (!done) insert_line(sec, policy);
      return;
    }
    // No units section: one before the parallel section (or at the end).
    uint32_t at = static_cast<uint32_t>(text_.size());
    for (const ast::Section& sec : tree_.sections)
      if (sec.kind == "parallel" || sec.kind == "train") {
        at = sec.span.begin;
        break;
      }
    edits_.push_back({at, at, fmt::format("units {{\n  {}\n}}\n\n", policy)});
  }

  std::string result() {
    std::stable_sort(edits_.begin(), edits_.end(),
                     [](const Edit& a, const Edit& b) { return a.begin > b.begin; });
    std::string out = text_;
    for (const Edit& e : edits_)
      out.replace(e.begin, e.end - e.begin, e.text);
    return out;
  }

 private:
  static const ast::Entry* find(const std::vector<ast::Entry>& entries, std::string_view key) {
    for (const ast::Entry& e : entries)
      if (e.key == key) return &e;
    return nullptr;
  }

  ast::Section& section_of(std::string_view kind) {
    for (ast::Section& s : tree_.sections)
      if (s.kind == kind) return s;
    throw std::runtime_error(fmt::format("the spec has no '{}' section to rewrite", kind));
  }

  // A line before the section's closing brace, indented as its first entry.
  void insert_line(const ast::Section& sec, const std::string& line) {
    std::string indent = "  ";
    if (!sec.entries.empty()) {
      const LineCol lc = file_.line_col(sec.entries.front().span.begin);
      indent.assign(lc.column - 1, ' ');
    }
    uint32_t close = sec.span.end - 1;  // the '}'
    uint32_t line_start = close;
    while (line_start > 0 && (text_[line_start - 1] == ' ' || text_[line_start - 1] == '\t'))
      --line_start;
    if (line_start > 0 && text_[line_start - 1] == '\n')
      edits_.push_back({line_start, line_start, indent + line + "\n"});
    else
      edits_.push_back({close, close, " " + line + " "});
  }

  SourceFile file_;
  Diagnostics diags_;
  ast::File tree_;
  std::string text_;
  std::vector<Edit> edits_;
};

}  // namespace

std::string unknown_knob_error(const std::vector<std::string>& keep) {
  const std::vector<std::string_view> knobs(kTuneKnobs.begin(), kTuneKnobs.end());
  for (const std::string& k : keep) {
    if (std::find(knobs.begin(), knobs.end(), k) != knobs.end()) continue;
    std::string close = closest_match(k, knobs);
    return fmt::format("--keep {}: no such knob{}; tune's knobs are {}", k,
                       close.empty() ? "" : fmt::format(" (did you mean '{}'?)", close),
                       quoted_choices(knobs, " and "));
  }
  return "";
}

TuneResult tune(const Spec& spec, const Hardware& hw, const TuneOptions& options) {
  return Search(spec, hw, options).run();
}

std::string rewrite_spec_text(const std::string& name, const std::string& text, const Spec& from,
                              const Spec& to) {
  Rewriter w(name, text);
  const ParallelSpec &a = from.parallel, &b = to.parallel;
  if (a.world != b.world) w.set("parallel", "world", std::to_string(b.world));
  if (a.ranks_per_node != b.ranks_per_node)
    w.set("parallel", "ranks_per_node", std::to_string(b.ranks_per_node));
  if (a.sharding != b.sharding) w.set("parallel", "sharding", std::string(to_string(b.sharding)));
  if (is_hybrid(b.sharding) && (!is_hybrid(a.sharding) || a.shard_group != b.shard_group))
    w.set("parallel", "shard_group", std::to_string(b.shard_group));
  if (!is_hybrid(b.sharding) && is_hybrid(a.sharding)) w.remove("parallel", "shard_group");
  if (a.precision.reduce != b.precision.reduce)
    w.set_block("parallel", "precision", {{"reduce", std::string(to_string(b.precision.reduce))}});
  std::vector<std::pair<std::string, std::string>> pf;
  if (a.prefetch.forward != b.prefetch.forward)
    pf.push_back({"forward", b.prefetch.forward ? "true" : "false"});
  if (a.prefetch.backward != b.prefetch.backward)
    pf.push_back({"backward", std::string(to_string(b.prefetch.backward))});
  if (a.prefetch.max_inflight != b.prefetch.max_inflight)
    pf.push_back({"max_inflight", std::to_string(b.prefetch.max_inflight)});
  if (!pf.empty()) w.set_block("parallel", "prefetch", pf);
  if (a.recompute != b.recompute)
    w.set("parallel", "recompute", std::string(to_string(b.recompute)));
  if (a.offload != b.offload || a.offload_activations != b.offload_activations) {
    if (b.offload_activations || a.offload_activations)
      w.set_block("parallel", "offload",
                  {{"params", std::string(to_string(b.offload))},
                   {"activations", b.offload_activations ? "cpu" : "none"}});
    else
      w.set("parallel", "offload", std::string(to_string(b.offload)));
  }
  std::vector<std::pair<std::string, std::string>> acc;
  if (a.accumulate.micro_batches != b.accumulate.micro_batches)
    acc.push_back({"micro_batches", std::to_string(b.accumulate.micro_batches)});
  if (a.accumulate.reduce != b.accumulate.reduce)
    acc.push_back({"reduce", std::string(to_string(b.accumulate.reduce))});
  if (!acc.empty()) w.set_block("parallel", "accumulate", acc);
  if (from.units != to.units) w.set_units(units_text(to.units));
  if (from.train.micro_batch != to.train.micro_batch)
    w.set("train", "micro_batch", std::to_string(to.train.micro_batch));
  std::string out = w.result();
  FrontendResult back = load_spec_text(name, out);
  if (!back.spec || !same_configuration(*back.spec, to))
    throw std::runtime_error(
        fmt::format("the rewritten spec does not read back as the chosen configuration{}",
                    back.spec ? "" : ":\n" + back.diagnostics));
  return out;
}

}  // namespace fsdpgen
