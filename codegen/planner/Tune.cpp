// Tune: the pruned search over the candidate space (codegen/planner/TuneSpace.h),
// by its lower bounds (codegen/planner/TuneBounds.h); the spec text rewrite that
// writes the winner is codegen/planner/TuneRewrite.cpp.
#include "codegen/planner/Tune.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "codegen/planner/Activations.h"
#include "codegen/planner/Cost.h"
#include "codegen/planner/Fit.h"
#include "codegen/planner/Lower.h"
#include "codegen/planner/Memory.h"
#include "codegen/planner/Planner.h"
#include "codegen/planner/Schedule.h"
#include "codegen/planner/TuneBounds.h"
#include "codegen/planner/TuneSpace.h"
#include "runtime/suggest/suggest.h"

namespace fsdpgen {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Milliseconds per token each rank trains: `ms` over the step's tokens per
// rank. What the search ranks by: at a fixed world and global batch, the
// step's order; where the batch changes, not fooled by a smaller one.
double per_token(const Spec& s, double ms) {
  return ms / static_cast<double>(s.train.micro_batch * s.parallel.accumulate.micro_batches *
                                  s.model.context);
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
        TuneCandidate c = other ? plan(s, std::move(*other), std::move(timeline))
                                : plan(s, own_prefetch, std::move(timeline));
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
    const int64_t global = spec_.global_batch();
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
                  if (bc.micro_batches > 1 && knob_kept(o_, "reduce") && ar != p.accumulate.reduce)
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
                  // Muon's Newton-Schulz has no host-side optimizer (TargetSupport).
                  if (q.offload == Offload::Cpu && s.train.optimizer.kind == OptimizerKind::Muon)
                    continue;
                  if (!activations_size_error(s, schedule_options_for(hw_, s).flash_attention)
                           .empty())
                    continue;
                  const Units& u = units_for(s);
                  if (!shardable(u, q.shard_group)) continue;
                  if (!o_.allow_numerics && !numerics_changes(spec_, s).empty()) {
                    r_.held_numerics += variants;
                    continue;
                  }
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

  // The schedule step of the one entry (codegen/planner/Planner.h) on the
  // units lowered once for every structure that shares them.
  Schedule schedule_of(const Spec& s, const Units& lowered) const {
    Plan p;
    p.units = lowered;
    p.units->spec = s;
    PlanOptions o;
    o.stop_after = PlanStep::Schedule;
    run_plan(s, hw_, o, p);
    return std::move(*p.schedule);
  }

  // The rest of the one entry's steps (memory, verify, cost) on a schedule
  // of `s`; `predicted`: predict(sched, hw_) where the search already has it.
  TuneCandidate plan(const Spec& s, Schedule sched,
                     std::optional<Timeline> predicted = std::nullopt) {
    Clock::time_point t = Clock::now();
    Plan p;
    p.schedule = std::move(sched);
    p.timeline = std::move(predicted);
    run_plan(s, hw_, {}, p);
    if (p.failure != Failure::None)
      throw std::logic_error(fmt::format("tune's candidate ({}) has no plan: {}",
                                         fmt::join(changes_between(spec_, s), ", "),
                                         p.violations.empty() ? p.error : p.violations.front()));
    const MemoryPlan& m = *p.memory;
    const Timeline& tl = *p.timeline;
    TuneCandidate c;
    c.spec = s;
    c.changes = changes_between(spec_, s);
    c.numerics = numerics_changes(spec_, s);
    c.batch_changed = spec_.global_batch() != s.global_batch();
    c.fits = p.fits;
    c.device_bytes = m.device_arena_bytes;
    c.host_bytes = m.host_arena_bytes;
    c.step_ms = tl.step_ms;
    c.ms_per_token = per_token(s, tl.step_ms);
    c.tokens_per_s_per_gpu = tl.tokens_per_s / static_cast<double>(s.parallel.world);
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

}  // namespace fsdpgen
