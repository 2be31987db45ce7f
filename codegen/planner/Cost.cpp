// Cost: each op's work from the hardware's figures (a fixed part, then bytes
// over a link), then an event-driven run of the streams in which transfers
// over the same link class at the same time split its bandwidth.
#include "codegen/planner/Cost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codegen/planner/Calibrated.h"
#include "codegen/planner/Flops.h"
#include "codegen/planner/Intervals.h"
#include "codegen/planner/Validation.h"
#include "runtime/profile/profile.h"

namespace fsdpgen {
namespace {

// A GPT block's forward is ~6 matrix multiplies of similar size (qkv, proj,
// fc, fc-proj and the two attention products); its backward runs twice as
// many of the same sizes. The efficiency curve is evaluated per GEMM.
constexpr double kGemmsPerForward = 6;

// Link classes whose bandwidth concurrent transfers share.
enum class Link { None, Intra, Inter, HostToDevice, DeviceToHost };
constexpr size_t kLinks = 5;

bool is_compute(OpKind k) {
  return k == OpKind::Forward || k == OpKind::Recompute || k == OpKind::Backward ||
         k == OpKind::GradNorm || k == OpKind::OptimizerStep || k == OpKind::MuonOrthogonalize;
}
bool is_collective(OpKind k) {
  return k == OpKind::AllGather || k == OpKind::ReduceScatter || k == OpKind::AllReduce;
}
bool is_comm(OpKind k) {
  return k == OpKind::AllGather || k == OpKind::ReduceScatter || k == OpKind::AllReduce ||
         k == OpKind::CopyH2D || k == OpKind::CopyD2H || k == OpKind::MuonGather ||
         k == OpKind::MuonScatter;
}

// How an op spends its time: `fixed_s`, then `bytes` at `rate` (bytes/s when
// alone on `link`).
struct Work {
  double fixed_s = 0;
  double bytes = 0;
  double rate = 0;
  Link link = Link::None;
  double seconds() const { return fixed_s + (bytes > 0 ? bytes / rate : 0); }
};

// What slows an op beside others: a compute op (`compute`) and a collective
// with measured `contention` (a CPU profile's) slow each other while both run.
struct Sharing {
  bool compute = false;
  std::optional<Contention> contention;
};

void require(bool ok, const Hardware& hw, std::string_view what) {
  if (!ok) throw std::invalid_argument(fmt::format("hardware '{}' has no {}", hw.name, what));
}

Work collective_work(const Schedule& s, const Op& op, const Hardware& hw) {
  const int64_t n = op.group_size;
  if (n <= 1) return {};
  const ParallelSpec& p = s.units.spec.parallel;
  const GroupPlacement g = group_placement(p, op.group, n);
  const bool inter = g.nodes > 1;
  const double steps = static_cast<double>(n - 1), inter_steps = static_cast<double>(g.nodes - 1);
  const double hops_s = (steps - inter_steps) * hw.intra_node.hop_latency_s +
                        inter_steps * hw.inter_node.hop_latency_s;
  double busbw = hw.intra_node.busbw_bytes_per_s;
  if (inter) {
    const double node_share = static_cast<double>(g.ranks_per_node) /
                              static_cast<double>(std::max<int64_t>(1, p.ranks_per_node));
    busbw = std::min(busbw, hw.inter_node.busbw_bytes_per_s * std::min(1.0, node_share));
  }
  require(busbw > 0, hw, inter ? "inter-node bus bandwidth" : "intra-node bus bandwidth");
  if (op.kind == OpKind::MuonGather || op.kind == OpKind::MuonScatter)
    // Point to point: the busiest rank's bytes (the payload) after one hop.
    return {hw.collective_base_latency_s +
                (inter ? hw.inter_node.hop_latency_s : hw.intra_node.hop_latency_s),
            static_cast<double>(op.payload_bytes), busbw, inter ? Link::Inter : Link::Intra};
  const double ring_bytes = static_cast<double>(op.payload_bytes) * steps / static_cast<double>(n);
  const double passes = op.kind == OpKind::AllReduce ? 2 : 1;  // reduce-scatter then all-gather
  return {hw.collective_base_latency_s + passes * hops_s, passes * ring_bytes, busbw,
          inter ? Link::Inter : Link::Intra};
}

Work compute_work(const Schedule& s, const Op& op, const Hardware& hw) {
  Work w;
  w.fixed_s = hw.launch_overhead_s;
  const bool gemm =
      op.kind == OpKind::Forward || op.kind == OpKind::Recompute || op.kind == OpKind::Backward;
  if (op.flops > 0) {
    if (gemm) {
      const DType d = s.units.spec.parallel.precision.param;
      require(hw.peak_flops(d) > 0 && hw.gemm_max_efficiency > 0, hw,
              fmt::format("{} compute rate", to_string(d)));
      const double per_gemm = op.flops / (kGemmsPerForward * (op.kind == OpKind::Backward ? 2 : 1));
      w.fixed_s += op.flops / (hw.peak_flops(d) * hw.gemm_efficiency(per_gemm));
    } else if (op.kind == OpKind::MuonOrthogonalize) {
      // Newton-Schulz: 3 GEMMs an iteration in ns_dtype, priced as one
      // matrix's (the busiest owner's FLOPs over its iterations).
      const OptimizerSpec& o = s.units.spec.train.optimizer;
      require(hw.peak_flops(o.ns_dtype) > 0 && hw.gemm_max_efficiency > 0, hw,
              fmt::format("{} compute rate", to_string(o.ns_dtype)));
      const double per_gemm = op.flops / static_cast<double>(3 * std::max<int64_t>(1, o.ns_steps));
      w.fixed_s += op.flops / (hw.peak_flops(o.ns_dtype) * hw.gemm_efficiency(per_gemm));
    } else {
      require(hw.peak_fp32_flops > 0, hw, "fp32 compute rate");
      w.fixed_s += op.flops / hw.peak_fp32_flops;
    }
  }
  if (op.memory_bytes > 0) {
    const bool host = op.stream == StreamId::Host;
    const double bw = host ? hw.host_memory_bytes_per_s : hw.memory_bytes_per_s;
    require(bw > 0, hw, host ? "host memory bandwidth" : "memory bandwidth");
    w.fixed_s += static_cast<double>(op.memory_bytes) / bw;
  }
  return w;
}

Work copy_work(const Op& op, const Hardware& hw) {
  require(hw.host_link_bytes_per_s > 0, hw, "host link bandwidth");
  return {hw.launch_overhead_s, static_cast<double>(op.payload_bytes), hw.host_link_bytes_per_s,
          op.kind == OpKind::CopyH2D ? Link::HostToDevice : Link::DeviceToHost};
}

Work op_work(const Schedule& s, const Op& op, const Hardware& hw) {
  switch (op.kind) {
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::MuonGather:
    case OpKind::MuonScatter:
      return collective_work(s, op, hw);
    case OpKind::CopyH2D:
    case OpKind::CopyD2H:
      return copy_work(op, hw);
    case OpKind::Forward:
    case OpKind::Recompute:
    case OpKind::Backward:
    case OpKind::GradNorm:
    case OpKind::OptimizerStep:
    case OpKind::MuonOrthogonalize:
      return compute_work(s, op, hw);
    case OpKind::Free:
      return {};
  }
  return {};
}

// An op's work from the profile, and how it was found (Missing: not at all).
struct Calibrated {
  Work work;
  Lookup how = Lookup::Missing;
};

Lookup worse(Lookup a, Lookup b) {
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

Calibrated calibrated_work(const Schedule& s, const Op& op, const CalibratedTimes& times) {
  Calibrated c;
  c.how = Lookup::Measured;
  auto add = [&](const Looked& l) {
    c.how = worse(c.how, l.how);
    c.work.fixed_s += l.seconds;
  };
  switch (op.kind) {
    case OpKind::Forward:
    case OpKind::Recompute:
    case OpKind::Backward:
      c.work.fixed_s = times.compute().op_overhead_s;
      for (const OpLayerPass& l : op_layer_passes(s, op)) {
        Looked t = times.layer(l.key);
        t.seconds *= l.share;
        add(t);
      }
      return c;
    case OpKind::GradNorm:
    case OpKind::OptimizerStep:
      c.work.fixed_s = times.compute().op_overhead_s;
      for (const profile::ElementwiseTime& e : op_elementwise(s, op))
        add(times.elementwise(e));
      return c;
    case OpKind::AllGather:
    case OpKind::ReduceScatter:
    case OpKind::AllReduce:
    case OpKind::MuonGather:  // "send_recv"; sent_bytes is the payload
    case OpKind::MuonScatter: {
      if (op.group_size <= 1) return c;
      const ParallelSpec& p = s.units.spec.parallel;
      const GroupPlacement g = group_placement(p, op.group, op.group_size);
      const Looked l = times.collective(profile_op_name(op.kind), collective_dtype(s, op),
                                        op.group_size, g.nodes, op.payload_bytes);
      c.how = l.how;
      // The measured size-independent part, then the ring's bytes at the rate
      // the rest implies (so that transfers sharing a link still share it).
      const double bytes = static_cast<double>(op.sent_bytes());
      c.work = {l.latency_s, l.seconds > l.latency_s ? bytes : 0,
                bytes / std::max(l.seconds - l.latency_s, 1e-12),
                g.nodes > 1 ? Link::Inter : Link::Intra};
      return c;
    }
    case OpKind::CopyH2D:
    case OpKind::CopyD2H: {
      const Looked l = times.copy(profile_op_name(op.kind), op.payload_bytes);
      c.how = l.how;
      const double bytes = static_cast<double>(op.payload_bytes);
      c.work = {0, bytes, bytes / std::max(l.seconds, 1e-12),
                op.kind == OpKind::CopyH2D ? Link::HostToDevice : Link::DeviceToHost};
      return c;
    }
    case OpKind::MuonOrthogonalize: {
      // The slowest owner's matrices, one after another.
      const std::vector<OpMuonMatrix> matrices = op_muon_ns(s, op);
      if (matrices.empty()) c.how = Lookup::Missing;
      std::map<int64_t, double> owner_s;
      for (const OpMuonMatrix& m : matrices) {
        const Looked l = times.muon_ns(m.key);
        c.how = worse(c.how, l.how);
        owner_s[m.owner] += l.seconds;
      }
      c.work.fixed_s = times.compute().op_overhead_s;
      for (const auto& [owner, seconds] : owner_s)
        c.work.fixed_s = std::max(c.work.fixed_s, times.compute().op_overhead_s + seconds);
      return c;
    }
    case OpKind::Free:
      return c;
  }
  return c;
}

void check_well_formed(const Schedule& s) {
  const int n = static_cast<int>(s.ops.size());
  for (int i = 0; i < n; ++i) {
    const Op& op = s.ops[i];
    if (op.id != i)
      throw std::logic_error(fmt::format("cost: op at position {} has id {}", i, op.id));
    for (int d : op.deps)
      if (d < 0 || d >= n || d == i)
        throw std::logic_error(fmt::format("cost: op #{} depends on #{}", i, d));
  }
}

// Runs the streams; returns each op's [start, end) in seconds. Each op does
// its fixed part, then its bytes; between two events every op goes at a
// constant speed: its link's rate split among the transfers on it and, with
// `contention`, the measured fractions while collectives and compute ops run
// at once.
std::vector<std::pair<double, double>> simulate(const Schedule& s, const std::vector<Work>& work,
                                                const std::vector<Sharing>& sharing_of,
                                                const CostOptions& options) {
  const size_t n = s.ops.size();
  std::vector<std::vector<int>> queue(kStreamNames.size());
  for (const Op& op : s.ops)
    queue[static_cast<size_t>(op.stream)].push_back(op.id);
  std::vector<size_t> head(queue.size(), 0);
  std::vector<int> busy(queue.size(), -1);  // op running on each stream
  std::vector<char> done(n, 0);
  std::vector<double> start(n, 0), end(n, 0), fixed_left(n, 0), left(n, 0);
  std::vector<int> running;
  size_t finished = 0;
  double t = 0;
  auto ready = [&](int i) {
    return std::all_of(s.ops[i].deps.begin(), s.ops[i].deps.end(),
                       [&](int d) { return done[d] != 0; });
  };
  while (finished < n) {
    // Start what can start now; ops of zero length end at once and may let others start.
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t st = 0; st < queue.size(); ++st) {
        if (busy[st] >= 0 || head[st] == queue[st].size() || !ready(queue[st][head[st]])) continue;
        const int i = queue[st][head[st]++];
        start[i] = t;
        fixed_left[i] = work[i].fixed_s;
        left[i] = work[i].bytes;
        progress = true;
        if (work[i].fixed_s > 0 || work[i].bytes > 0) {
          busy[st] = i;
          running.push_back(i);
        } else {
          end[i] = t, done[i] = 1, ++finished;
        }
      }
    }
    if (running.empty()) {
      if (finished == n) break;
      int blocked = -1;
      for (size_t st = 0; st < queue.size() && blocked < 0; ++st)
        if (head[st] < queue[st].size()) blocked = queue[st][head[st]];
      throw std::logic_error(
          fmt::format("cost: the schedule deadlocks at {} (#{}): a dependency cycle",
                      s.ops[blocked].label(), blocked));
    }
    // Speeds until the next event.
    std::array<int, kLinks> on_link{};  // transfers on each link
    bool computing = false;
    double compute_speed = 1;
    for (int i : running) {
      if (fixed_left[i] <= 0 && left[i] > 0) ++on_link[static_cast<size_t>(work[i].link)];
      computing = computing || sharing_of[i].compute;
      if (options.contention && sharing_of[i].contention)
        compute_speed = std::min(compute_speed, sharing_of[i].contention->compute_speed);
    }
    auto speed = [&](int i) {
      if (!options.contention) return 1.0;
      if (sharing_of[i].compute) return compute_speed;
      return computing && sharing_of[i].contention ? sharing_of[i].contention->comm_speed : 1.0;
    };
    auto rate = [&](int i) {
      const int k = on_link[static_cast<size_t>(work[i].link)];
      const double r = options.share_links && work[i].link != Link::None && k > 1 ? work[i].rate / k
                                                                                  : work[i].rate;
      return r * speed(i);
    };
    double next = std::numeric_limits<double>::infinity();
    int first = -1;
    for (int i : running) {
      const double e = fixed_left[i] > 0 ? t + fixed_left[i] / speed(i) : t + left[i] / rate(i);
      if (e < next) next = e, first = i;
    }
    for (int i : running) {
      if (fixed_left[i] > 0) {
        fixed_left[i] = i == first ? 0 : fixed_left[i] - speed(i) * (next - t);
        if (fixed_left[i] <= 1e-9 * work[i].fixed_s) fixed_left[i] = 0;
        continue;
      }
      left[i] = i == first ? 0 : left[i] - rate(i) * (next - t);
      if (left[i] <= 1e-9 * work[i].bytes) left[i] = 0;
    }
    t = next;
    std::erase_if(running, [&](int i) {
      if (fixed_left[i] > 0 || left[i] > 0) return false;
      end[i] = t, done[i] = 1, ++finished;
      busy[static_cast<size_t>(s.ops[i].stream)] = -1;
      return true;
    });
  }
  std::vector<std::pair<double, double>> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = {start[i], end[i]};
  return out;
}

std::string gb(double bytes) {
  return fmt::format("{:.2f} GB", bytes / 1e9);
}
// TFLOPS, or GFLOPS below one TFLOPS (CPUs).
std::string flops_rate(double tflops) {
  return tflops >= 1 ? fmt::format("{:.1f} TFLOPS", tflops)
                     : fmt::format("{:.1f} GFLOPS", tflops * 1e3);
}
std::string pct(double x) {
  return fmt::format("{:.1f}%", 100 * x);
}

}  // namespace

double op_seconds(const Schedule& s, const Op& op, const Hardware& hw) {
  return op_work(s, op, hw).seconds();
}

Timeline predict(const Schedule& s, const Hardware& hw, const CostOptions& options) {
  check_well_formed(s);
  const Spec& spec = s.units.spec;
  Timeline t;
  std::optional<CalibratedTimes> times;
  if (hw.profile) {
    times.emplace(*hw.profile, std::min(spec.parallel.world,
                                        std::max<int64_t>(1, spec.parallel.ranks_per_node)));
    t.source = fmt::format("hardware profile {} ({}; compute measured with {} rank{} per node{})",
                           hw.profile_path, hw.description, times->compute().ranks_per_node,
                           times->compute().ranks_per_node == 1 ? "" : "s",
                           times->placement_exact() ? "" : ", not this plan's");
  } else {
    t.source = fmt::format(
        "built-in figures for '{}' (datasheets and estimates; `fsdpgen "
        "calibrate` measures this machine)",
        hw.name);
  }
  std::vector<Work> work;
  std::vector<Sharing> sharing;
  work.reserve(s.ops.size());
  sharing.reserve(s.ops.size());
  for (const Op& op : s.ops) {
    Lookup how = Lookup::Missing;
    if (times && op.kind != OpKind::Free) {
      Calibrated c = calibrated_work(s, op, *times);
      how = c.how;
      if (how != Lookup::Missing) work.push_back(c.work);
      ++(how == Lookup::Measured       ? t.ops_measured
         : how == Lookup::Interpolated ? t.ops_interpolated
         : how == Lookup::Scaled       ? t.ops_scaled
                                       : t.ops_estimated);
    }
    if (how == Lookup::Missing) work.push_back(op_work(s, op, hw));
    const Work& w = work.back();
    Sharing& sh = sharing.emplace_back();
    sh.compute = is_compute(op.kind);
    if (times && is_collective(op.kind) && op.group_size > 1 &&
        group_placement(spec.parallel, op.group, op.group_size).nodes == 1)
      if (const Contention c = times->contention(profile_op_name(op.kind), op.group_size);
          c.compute_speed < 1 || c.comm_speed < 1)
        sh.contention = c;
    if (!std::isfinite(w.seconds()) || w.fixed_s < 0 || w.bytes < 0)
      throw std::invalid_argument(
          fmt::format("cost: {} (#{}) has no finite duration on '{}'", op.label(), op.id, hw.name));
  }
  const auto spans = simulate(s, work, sharing, options);

  t.hardware = hw.name;
  t.accuracy =
      prediction_accuracy(hw, spec.parallel.world,
                          spec.parallel.world / std::max<int64_t>(1, spec.parallel.ranks_per_node));
  t.dtype = spec.parallel.precision.param;
  t.peak_tflops = hw.peak_flops(t.dtype) / 1e12;
  t.stream_busy_ms.assign(kStreamNames.size(), 0);
  Intervals compute, comm;
  const int validation_ops = validation_pass(s).op_count;
  for (const Op& op : s.ops) {
    const auto [a, b] = spans[op.id];
    t.ops.push_back({a * 1e3, b * 1e3});
    t.step_ms = std::max(t.step_ms, b * 1e3);
    if (op.id < validation_ops) t.validation_pass_ms = std::max(t.validation_pass_ms, b * 1e3);
    t.stream_busy_ms[static_cast<size_t>(op.stream)] += (b - a) * 1e3;
    if (is_compute(op.kind)) {
      compute.push_back({a, b});
      t.hardware_flops_per_rank += op.flops;
    }
    if (is_comm(op.kind)) comm.push_back({a, b});
    if (op.kind == OpKind::CopyH2D || op.kind == OpKind::CopyD2H) t.copy_bytes += op.payload_bytes;
    t.comm_bytes += op.sent_bytes();
  }
  compute = merged(std::move(compute));
  comm = merged(std::move(comm));
  t.compute_ms = length(compute) * 1e3;
  t.comm_ms = length(comm) * 1e3;
  t.exposed_comm_ms = (length(comm) - overlap(comm, compute)) * 1e3;

  const double rank_tokens = static_cast<double>(
      s.micro_batch * spec.parallel.accumulate.micro_batches * spec.model.context);
  t.tokens_per_step = rank_tokens * static_cast<double>(spec.parallel.world);
  t.model_flops_per_rank = model_flops_per_token(spec.model) * rank_tokens;
  if (t.step_ms > 0) {
    const double step_s = t.step_ms / 1e3;
    t.tokens_per_s = t.tokens_per_step / step_s;
    t.model_tflops = t.model_flops_per_rank / step_s / 1e12;
    t.hardware_tflops = t.hardware_flops_per_rank / step_s / 1e12;
  }
  if (t.peak_tflops > 0) {
    t.mfu = t.model_tflops / t.peak_tflops;
    t.hfu = t.hardware_tflops / t.peak_tflops;
  }
  return t;
}

std::string print_timeline(const Schedule& s, const Timeline& t) {
  const Spec& spec = s.units.spec;
  const ParallelSpec& p = spec.parallel;
  std::string out = fmt::format("predicted step of {} on {}: {:.1f} ms\n", spec.model.name,
                                t.hardware, t.step_ms);
  out += fmt::format(
      "  tokens          {:.0f} per step ({} ranks x {} micro-batch{} of {} x {}), {:.0f} "
      "tokens/s\n",
      t.tokens_per_step, p.world, p.accumulate.micro_batches,
      p.accumulate.micro_batches == 1 ? "" : "es", s.micro_batch, spec.model.context,
      t.tokens_per_s);
  out += fmt::format("  per GPU         model {} (MFU {} of {} {} peak), hardware {} (HFU {})\n",
                     flops_rate(t.model_tflops), pct(t.mfu), flops_rate(t.peak_tflops),
                     to_string(t.dtype), flops_rate(t.hardware_tflops), pct(t.hfu));
  const double step = t.step_ms > 0 ? t.step_ms : 1;
  out += fmt::format("  compute         {:.1f} ms busy ({} of the step)\n", t.compute_ms,
                     pct(t.compute_ms / step));
  out += fmt::format(
      "  communication   {:.1f} ms busy, {:.1f} ms exposed ({} of the step); {} sent per rank",
      t.comm_ms, t.exposed_comm_ms, pct(t.exposed_comm_ms / step),
      gb(static_cast<double>(t.comm_bytes)));
  if (t.copy_bytes > 0)
    out += fmt::format(", {} copied to or from the host", gb(static_cast<double>(t.copy_bytes)));
  out += "\n  streams busy   ";
  for (size_t st = 0; st < t.stream_busy_ms.size(); ++st)
    if (t.stream_busy_ms[st] > 0)
      out += fmt::format(" {} {:.1f} ms", kStreamNames[st], t.stream_busy_ms[st]);
  if (const TrainSpec& train = spec.train; train.val && train.val_every > 0) {
    const int64_t per_pass = p.world * s.micro_batch;
    const int64_t passes = (train.val_sequences + per_pass - 1) / per_pass;
    const double seconds = static_cast<double>(passes) * t.validation_pass_ms / 1e3;
    out += fmt::format(
        "\n  validation      {:.1f} ms per pass of {} sequences (micro-batch 0's forward: the "
        "step's ops #0-#{}); {} pass{} for val_sequences {}: {:.3g} s every {} steps ({} of the "
        "training time)",
        t.validation_pass_ms, per_pass, validation_pass(s).op_count - 1, passes,
        passes == 1 ? "" : "es", train.val_sequences, seconds, train.val_every,
        pct(seconds / (static_cast<double>(train.val_every) * step / 1e3)));
  }
  out += fmt::format("\n  figures         {}\n", timeline_source(t));
  out += fmt::format("  measured error  {}\n", t.accuracy.text);
  if (const auto& e = t.accuracy.expected) {
    // An MFU over 100% says the figures' peak is too low: left out.
    const std::string mfu =
        t.mfu / e->low <= 1 ? fmt::format(", MFU {}-{}", pct(t.mfu / e->high), pct(t.mfu / e->low))
                            : "";
    out += fmt::format(
        "  expect          a step of {:.1f}-{:.1f} ms, {:.0f}-{:.0f} tokens/s{} (the "
        "prediction times the measured {})\n",
        t.step_ms * e->low, t.step_ms * e->high, t.tokens_per_s / e->high, t.tokens_per_s / e->low,
        mfu, ratio_range(*e));
  }
  return out;
}

std::string timeline_source(const Timeline& t) {
  if (t.ops_measured + t.ops_interpolated + t.ops_scaled + t.ops_estimated == 0) return t.source;
  std::string out = fmt::format("{}: {} ops measured", t.source, t.ops_measured);
  if (t.ops_interpolated > 0) out += fmt::format(", {} interpolated in size", t.ops_interpolated);
  if (t.ops_scaled > 0) out += fmt::format(", {} scaled from other shapes", t.ops_scaled);
  if (t.ops_estimated > 0)
    out +=
        fmt::format(", {} not in the profile (built-in '{}' figures)", t.ops_estimated, t.hardware);
  return out;
}

std::string trace_json(const Schedule& s, const Timeline& t) {
  using nlohmann::ordered_json;
  const Spec& spec = s.units.spec;
  ordered_json events = ordered_json::array();
  events.push_back(
      {{"name", "process_name"},
       {"ph", "M"},
       {"pid", 0},
       {"args",
        {{"name", fmt::format("fsdpgen {} on {} (predicted)", spec.model.name, t.hardware)}}}});
  std::vector<bool> used(kStreamNames.size(), false);
  for (const Op& op : s.ops)
    used[static_cast<size_t>(op.stream)] = true;
  for (size_t st = 0; st < used.size(); ++st) {
    if (!used[st]) continue;
    const int tid = static_cast<int>(st);
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", tid},
                      {"args", {{"name", std::string(kStreamNames[st])}}}});
    events.push_back({{"name", "thread_sort_index"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", tid},
                      {"args", {{"sort_index", tid}}}});
  }
  for (const Op& op : s.ops) {
    const OpTime& ot = t.ops.at(op.id);
    ordered_json args = op_json(op);
    events.push_back({{"name", op.label()},
                      {"cat", std::string(to_string(op.kind))},
                      {"ph", "X"},
                      {"ts", ot.start_ms * 1e3},
                      {"dur", ot.ms() * 1e3},
                      {"pid", 0},
                      {"tid", static_cast<int>(op.stream)},
                      {"args", std::move(args)}});
  }
  ordered_json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  j["otherData"] = {{"model", spec.model.name},
                    {"world", spec.parallel.world},
                    {"hardware", t.hardware},
                    {"figures", timeline_source(t)},
                    {"measured_error", t.accuracy.text},
                    {"step_ms", t.step_ms},
                    {"model_tflops", t.model_tflops},
                    {"mfu", t.mfu},
                    {"exposed_comm_ms", t.exposed_comm_ms}};
  return j.dump() + "\n";
}

}  // namespace fsdpgen
