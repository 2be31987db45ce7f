// Calibrated: op -> profile keys, lookups with interpolation, and requests.
#include "codegen/planner/Calibrated.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "codegen/planner/Flops.h"
#include "codegen/planner/GroupPlacement.h"
#include "codegen/planner/Muon.h"

namespace fsdpgen {
namespace {

std::string dtype_name(DType d) {
  return std::string(to_string(d));
}

// The runtime's entry point a layer runs in: the final norm runs in the
// head's (runtime/cpu/gpt2.h: gpt2_head_forward computes both and the loss).
std::string_view layer_entry(LayerId::Kind k) {
  switch (k) {
    case LayerId::Kind::Embed:
      return "embed";
    case LayerId::Kind::Block:
      return "block";
    case LayerId::Kind::FinalNorm:
      return "";
    case LayerId::Kind::Head:
      return "head";
  }
  return "";
}

std::map<std::string, int64_t> layer_dims(const Schedule& s) {
  const ModelSpec& m = s.units.spec.model;
  return {{"B", s.micro_batch},     {"T", m.context},
          {"C", m.width},           {"H", m.heads},
          {"F", m.ffn_hidden},      {"V", m.vocab},
          {"Vp", m.padded_vocab()}, {"flash", s.options.flash_attention ? 1 : 0}};
}

bool same_kind(const profile::LayerTime& a, const profile::LayerTime& b) {
  return a.family == b.family && a.layer == b.layer && a.pass == b.pass && a.dtype == b.dtype &&
         a.grad_dtype == b.grad_dtype;
}

// Equal dims but for the micro-batch B.
bool same_shape(const profile::LayerTime& a, const profile::LayerTime& b) {
  auto without_b = [](std::map<std::string, int64_t> d) {
    d.erase("B");
    return d;
  };
  return same_kind(a, b) && without_b(a.dims) == without_b(b.dims);
}

int64_t dim(const profile::LayerTime& l, const std::string& name) {
  auto it = l.dims.find(name);
  return it == l.dims.end() ? 0 : it->second;
}

// FLOPs of a layer pass (the embedding's element count: it multiplies
// nothing), to scale a measured shape to another.
double layer_pass_work(const profile::LayerTime& l) {
  ModelSpec m;
  m.context = dim(l, "T");
  m.width = dim(l, "C");
  m.heads = std::max<int64_t>(1, dim(l, "H"));
  m.ffn_hidden = dim(l, "F");
  m.vocab = dim(l, "V");
  m.pad_vocab_to = std::max<int64_t>(1, dim(l, "Vp"));
  const int64_t tokens = dim(l, "B") * m.context;
  LayerId id;
  id.kind = l.layer == "embed"   ? LayerId::Kind::Embed
            : l.layer == "block" ? LayerId::Kind::Block
                                 : LayerId::Kind::Head;
  const double forward = id.kind == LayerId::Kind::Embed ? static_cast<double>(tokens * m.width)
                                                         : layer_forward_flops(m, id, tokens);
  return l.pass == "backward" ? 2 * forward : forward;
}

// t at x from measured (x, t) points (any order, x > 0): linear between the
// two that bracket x; beyond them, the line through the two nearest, never
// below proportional scaling of the nearest (time does not shrink faster
// than the work) nor, above the largest, below the largest's time. One
// point: proportional.
double interpolate(std::vector<std::pair<double, double>> pts, double x) {
  std::sort(pts.begin(), pts.end());
  pts.erase(std::unique(pts.begin(), pts.end(),
                        [](const auto& a, const auto& b) { return a.first == b.first; }),
            pts.end());
  if (pts.size() == 1) return pts[0].second * x / pts[0].first;
  auto line = [&](size_t i) {  // through points i and i + 1
    const auto [x0, t0] = pts[i];
    const auto [x1, t1] = pts[i + 1];
    return t0 + (t1 - t0) * (x - x0) / (x1 - x0);
  };
  if (x <= pts.front().first) return std::max(line(0), pts.front().second * x / pts.front().first);
  if (x >= pts.back().first) return std::max(line(pts.size() - 2), pts.back().second);
  size_t i = 0;
  while (pts[i + 1].first < x)
    ++i;
  return line(i);
}

template <class Entry, class Same, class Size>
Looked looked_up(const std::vector<Entry>& entries, Same same, Size size, double x) {
  std::vector<std::pair<double, double>> pts;
  for (const Entry& e : entries) {
    if (!same(e)) continue;
    if (static_cast<double>(size(e)) == x) return {e.seconds, Lookup::Measured};
    pts.emplace_back(static_cast<double>(size(e)), e.seconds);
  }
  if (pts.empty()) return {};
  return {interpolate(std::move(pts), x), Lookup::Interpolated};
}

// Among the entries `same` keeps, the one nearest to `work` in work (the
// log of the ratio), its time scaled by the ratio; entries (or a key) of no
// work have nothing to scale by. Missing when none is left.
template <class Entry, class Same, class Work>
Looked scaled_from_nearest(const std::vector<Entry>& entries, Same same, Work work_of,
                           double work) {
  const Entry* nearest = nullptr;
  double best = std::numeric_limits<double>::infinity();
  for (const Entry& e : entries) {
    if (!same(e) || !(work > 0) || !(work_of(e) > 0)) continue;
    const double d = std::abs(std::log(work_of(e) / work));
    if (d < best) best = d, nearest = &e;
  }
  if (!nearest) return {};
  return {nearest->seconds * work / work_of(*nearest), Lookup::Scaled};
}

void add_once(std::vector<profile::LayerTime>& v, const profile::LayerTime& l) {
  for (const profile::LayerTime& e : v)
    if (same_kind(e, l) && e.dims == l.dims) return;
  v.push_back(l);
}
void add_once(std::vector<profile::ElementwiseTime>& v, const profile::ElementwiseTime& x) {
  for (const profile::ElementwiseTime& e : v)
    if (e.op == x.op && e.dtype == x.dtype && e.elems == x.elems) return;
  v.push_back(x);
}
void add_once(std::vector<profile::MuonNsTime>& v, const profile::MuonNsTime& x) {
  for (const profile::MuonNsTime& e : v)
    if (e.rows == x.rows && e.cols == x.cols && e.ns_steps == x.ns_steps &&
        e.ns_dtype == x.ns_dtype)
      return;
  v.push_back(x);
}
void add_once(std::vector<profile::CollectiveTime>& v, const profile::CollectiveTime& x) {
  for (const profile::CollectiveTime& e : v)
    if (e.op == x.op && e.dtype == x.dtype && e.ranks == x.ranks && e.nodes == x.nodes &&
        e.bytes == x.bytes)
      return;
  v.push_back(x);
}
void add_once(std::vector<profile::CopyTime>& v, const profile::CopyTime& x) {
  for (const profile::CopyTime& e : v)
    if (e.op == x.op && e.bytes == x.bytes) return;
  v.push_back(x);
}

// Sizes every collective group and copy direction is also measured at, so
// that plans of other models interpolate: 4 KiB to 64 MiB.
constexpr int64_t kSweepBytes[] = {int64_t{4} << 10, int64_t{64} << 10, int64_t{1} << 20,
                                   int64_t{16} << 20, int64_t{64} << 20};
// Element counts the optimizer and the norm are also measured at.
constexpr int64_t kSweepElems[] = {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 23};

}  // namespace

std::vector<OpLayerPass> op_layer_passes(const Schedule& s, const Op& op) {
  std::string_view pass = op.kind == OpKind::Forward     ? "forward"
                          : op.kind == OpKind::Recompute ? "recompute"
                          : op.kind == OpKind::Backward  ? "backward"
                                                         : "";
  if (pass.empty() || op.segment < 0) return {};
  const Spec& spec = s.units.spec;
  profile::LayerTime key;
  key.family = std::string(to_string(spec.model.family));
  key.pass = std::string(pass);
  key.dtype = dtype_name(spec.parallel.precision.param);
  if (op.kind == OpKind::Backward) key.grad_dtype = dtype_name(unsharded_grad_dtype(spec.parallel));
  key.dims = layer_dims(s);
  std::vector<OpLayerPass> out;
  for (const LayerId& l : s.units.segments.at(op.segment).layers) {
    const std::string_view entry = layer_entry(l.kind);
    if (entry.empty()) continue;
    key.layer = std::string(entry);
    double share = 1;
    if (l.kind == LayerId::Kind::Block && !l.whole())
      share = layer_forward_flops(spec.model, l, 1) /
              layer_forward_flops(spec.model, {LayerId::Kind::Block, l.block}, 1);
    out.push_back({key, share});
  }
  return out;
}

std::vector<profile::ElementwiseTime> op_elementwise(const Schedule& s, const Op& op) {
  const ParallelSpec& p = s.units.spec.parallel;
  const std::string grads = dtype_name(grad_shard_dtype(p));
  std::vector<profile::ElementwiseTime> out;
  if (op.kind == OpKind::GradNorm) {
    for (const FlatUnit& u : s.units.units)
      out.push_back({"grad_norm", grads, u.shard_elems, 0, 0});
  } else if (op.kind == OpKind::OptimizerStep) {
    const FlatUnit& u = s.units.units.at(op.unit);
    const bool adamw = s.units.spec.train.optimizer.kind != OptimizerKind::Sgd;
    out.push_back({adamw ? "adamw" : "sgd", grads, u.shard_elems, 0, 0});
    if (op.operand(Role::Master) >= 0)
      out.push_back({"convert", dtype_name(p.precision.param), u.shard_elems, 0, 0});
  }
  return out;
}

std::vector<OpMuonMatrix> op_muon_ns(const Schedule& s, const Op& op) {
  if (op.kind != OpKind::MuonOrthogonalize || op.unit < 0) return {};
  const OptimizerSpec& o = s.units.spec.train.optimizer;
  const size_t u = static_cast<size_t>(op.unit);
  std::vector<OpMuonMatrix> out;
  for (size_t i = 0; i < s.muon.matrices.at(u).size(); ++i) {
    const MuonMatrix& m = s.muon.matrices[u][i];
    out.push_back({s.muon.owners.at(u).matrices.at(i).owner,
                   {m.rows, m.cols, o.ns_steps, dtype_name(o.ns_dtype), 0, 0}});
  }
  return out;
}

DType collective_dtype(const Schedule& s, const Op& op) {
  const ParallelSpec& p = s.units.spec.parallel;
  if (op.kind == OpKind::AllGather) return p.precision.param;
  if (op.kind == OpKind::AllReduce && op.unit < 0) return DType::FP32;
  if (op.kind == OpKind::MuonGather) return grad_shard_dtype(p);
  if (op.kind == OpKind::MuonScatter) return DType::FP32;  // the updates
  return p.precision.reduce;
}

std::string_view profile_op_name(OpKind k) {
  switch (k) {
    case OpKind::AllGather:
      return "all_gather";
    case OpKind::ReduceScatter:
      return "reduce_scatter";
    case OpKind::AllReduce:
      return "all_reduce";
    case OpKind::MuonGather:
    case OpKind::MuonScatter:
      return "send_recv";
    case OpKind::CopyH2D:
      return "h2d";
    case OpKind::CopyD2H:
      return "d2h";
    default:
      return "";
  }
}

CalibratedTimes::CalibratedTimes(const profile::Profile& profile, int64_t ranks_per_node)
    : profile_(profile) {
  for (const profile::Compute& c : profile.compute) {
    const auto distance = [&](const profile::Compute& x) {
      return std::abs(x.ranks_per_node - ranks_per_node);
    };
    if (!compute_ || distance(c) <= distance(*compute_)) compute_ = &c;
  }
  exact_ = compute_ && compute_->ranks_per_node == ranks_per_node;
}

Looked CalibratedTimes::layer(const profile::LayerTime& key) const {
  if (!compute_) return {};
  const auto batch = [](const profile::LayerTime& l) { return dim(l, "B"); };
  Looked found = looked_up(
      compute_->layers, [&](const profile::LayerTime& l) { return same_shape(l, key); }, batch,
      static_cast<double>(batch(key)));
  if (found.how != Lookup::Missing) return found;
  // Another shape of the same layer pass: the nearest in work, scaled.
  return scaled_from_nearest(
      compute_->layers, [&](const profile::LayerTime& l) { return same_kind(l, key); },
      layer_pass_work, layer_pass_work(key));
}

Looked CalibratedTimes::elementwise(const profile::ElementwiseTime& key) const {
  if (!compute_) return {};
  return looked_up(
      compute_->elementwise,
      [&](const profile::ElementwiseTime& e) { return e.op == key.op && e.dtype == key.dtype; },
      [](const profile::ElementwiseTime& e) { return e.elems; }, static_cast<double>(key.elems));
}

Looked CalibratedTimes::muon_ns(const profile::MuonNsTime& key) const {
  if (!compute_) return {};
  const auto flops = [](const profile::MuonNsTime& m) {
    return muon_ns_flops(m.rows, m.cols, m.ns_steps);
  };
  const auto same_dtype = [&](const profile::MuonNsTime& m) { return m.ns_dtype == key.ns_dtype; };
  for (const profile::MuonNsTime& m : compute_->muon_ns)
    if (same_dtype(m) && m.rows == key.rows && m.cols == key.cols && m.ns_steps == key.ns_steps)
      return {m.seconds, Lookup::Measured};
  return scaled_from_nearest(compute_->muon_ns, same_dtype, flops, flops(key));
}

Looked CalibratedTimes::collective(std::string_view op, DType dtype, int64_t ranks, int64_t nodes,
                                   int64_t bytes) const {
  const std::string d = dtype_name(dtype);
  auto group = [&](const profile::CollectiveTime& c, bool any_dtype) {
    return c.op == op && c.ranks == ranks && c.nodes == nodes && (any_dtype || c.dtype == d);
  };
  const auto size = [](const profile::CollectiveTime& c) { return c.bytes; };
  // The same group in another dtype moves the same bytes.
  bool any_dtype = false;
  Looked found = looked_up(
      profile_.collectives, [&](const auto& c) { return group(c, false); }, size,
      static_cast<double>(bytes));
  if (found.how == Lookup::Missing) {
    any_dtype = true;
    found = looked_up(
        profile_.collectives, [&](const auto& c) { return group(c, true); }, size,
        static_cast<double>(bytes));
  }
  if (found.how == Lookup::Missing) return found;
  found.latency_s = found.seconds;
  for (const profile::CollectiveTime& c : profile_.collectives)
    if (group(c, any_dtype)) found.latency_s = std::min(found.latency_s, c.seconds);
  return found;
}

Looked CalibratedTimes::copy(std::string_view op, int64_t bytes) const {
  return looked_up(
      profile_.copies, [&](const profile::CopyTime& c) { return c.op == op; },
      [](const profile::CopyTime& c) { return c.bytes; }, static_cast<double>(bytes));
}

Contention CalibratedTimes::contention(std::string_view op, int64_t ranks) const {
  const profile::ContentionTime* e = nullptr;
  for (const profile::ContentionTime& c : profile_.contention)
    if (c.collective.op == op && c.collective.ranks == ranks && c.collective.nodes == 1) e = &c;
  if (!e) return {};
  const profile::CollectiveTime* call = nullptr;
  for (const profile::CollectiveTime& c : profile_.collectives)
    if (c.op == e->collective.op && c.dtype == e->collective.dtype && c.ranks == ranks &&
        c.nodes == 1 && c.bytes == e->collective.bytes)
      call = &c;
  const profile::LayerTime* pass = nullptr;
  for (const profile::Compute& section : profile_.compute)
    if (section.ranks_per_node == ranks)
      for (const profile::LayerTime& l : section.layers)
        if (same_kind(l, e->layer) && l.dims == e->layer.dims) pass = &l;
  if (!call || !pass) return {};  // a hand-made profile: nothing to compare with
  return {std::min(1.0, pass->seconds / e->layer.seconds),
          std::min(1.0, call->seconds / e->collective.seconds)};
}

Hardware calibrated_hardware(profile::Profile profile, const std::string& path) {
  std::optional<Hardware> base = find_hardware(profile.device.base);
  if (!base)
    throw profile::ProfileError(
        fmt::format("{}: device.base: {}", path, unknown_hardware_error(profile.device.base)));
  if (base->gpu != (profile.device.kind == "cuda"))
    throw profile::ProfileError(
        fmt::format("{}: device.base: '{}' is {}, but the profile measured the {} runtime", path,
                    base->name, base->gpu ? "a GPU" : "a CPU", profile.device.kind));
  Hardware hw = *base;
  hw.description =
      fmt::format("{} ({} {}), measured {} by {}", profile.device.name, profile.device.cores,
                  base->gpu ? "SMs" : "cores", profile.created, profile.written_by);
  int64_t ranks = 1;
  for (const profile::Compute& c : profile.compute)
    ranks = std::max(ranks, c.ranks_per_node);
  // A CPU's memory is its ranks'; a GPU's its own.
  hw.memory_bytes = base->gpu ? profile.device.memory_bytes : profile.device.memory_bytes / ranks;
  if (!base->gpu) hw.host_memory_bytes = hw.memory_bytes;  // one RAM
  hw.profile = std::make_shared<const profile::Profile>(std::move(profile));
  hw.profile_path = path;
  return hw;
}

Hardware hardware_named(const std::string& name_or_path) {
  if (std::optional<Hardware> hw = find_hardware(name_or_path)) return *hw;
  std::error_code ec;
  if (name_or_path.ends_with(".json") || name_or_path.find('/') != std::string::npos ||
      std::filesystem::exists(name_or_path, ec))
    return calibrated_hardware(profile::load(name_or_path), name_or_path);
  throw std::invalid_argument(unknown_hardware_error(name_or_path) +
                              "; or a profile written by `fsdpgen calibrate` (a .json file)");
}

profile::Profile calibration_request(const std::vector<Schedule>& schedules, const Hardware& base,
                                     int64_t ranks_per_node, const std::string& sweep,
                                     int64_t nodes) {
  profile::Profile r;
  r.sweep = sweep;
  r.device.kind = base.gpu ? "cuda" : "cpu";
  r.device.base = base.name;
  profile::Compute compute;
  std::vector<profile::CollectiveTime> largest;  // per collective op, for contention entries
  for (const Schedule& s : schedules) {
    for (const Op& op : s.ops) {
      for (const OpLayerPass& l : op_layer_passes(s, op))
        add_once(compute.layers, l.key);
      for (const profile::ElementwiseTime& e : op_elementwise(s, op)) {
        add_once(compute.elementwise, e);
        for (int64_t n : kSweepElems)
          add_once(compute.elementwise, {e.op, e.dtype, n, 0, 0});
      }
      for (const OpMuonMatrix& m : op_muon_ns(s, op))
        add_once(compute.muon_ns, m.key);
      const std::string_view name = profile_op_name(op.kind);
      if (name.empty()) continue;
      if (op.kind == OpKind::CopyH2D || op.kind == OpKind::CopyD2H) {
        add_once(r.copies, {std::string(name), op.payload_bytes, 0, 0});
        continue;
      }
      const GroupPlacement g = group_placement(s.units.spec.parallel, op.group, op.group_size);
      if (op.group_size < 2 || g.nodes > nodes || op.group_size > ranks_per_node * g.nodes)
        continue;
      const std::string dtype = dtype_name(collective_dtype(s, op));
      if (op.payload_bytes > 0)  // a Muon exchange of no matrix slices moves nothing
        add_once(r.collectives,
                 {std::string(name), dtype, op.group_size, g.nodes, op.payload_bytes, 0, 0});
      if (g.nodes == 1 && op.group_size == ranks_per_node && name != "send_recv") {
        auto same = std::find_if(largest.begin(), largest.end(),
                                 [&](const profile::CollectiveTime& c) { return c.op == name; });
        if (same == largest.end())
          largest.push_back({std::string(name), dtype, op.group_size, 1, op.payload_bytes, 0, 0});
        else if (op.payload_bytes > same->bytes)
          *same = {std::string(name), dtype, op.group_size, 1, op.payload_bytes, 0, 0};
      }
      for (int64_t bytes : kSweepBytes)
        add_once(r.collectives, {std::string(name), dtype, op.group_size, g.nodes, bytes, 0, 0});
    }
  }
  for (const char* dir : {"h2d", "d2h"})
    for (int64_t bytes : kSweepBytes)
      add_once(r.copies, {dir, bytes, 0, 0});
  for (int64_t k : {int64_t{1}, ranks_per_node}) {
    if (!r.compute.empty() && r.compute.back().ranks_per_node == k) continue;
    compute.ranks_per_node = k;
    r.compute.push_back(compute);
  }
  if (!base.gpu && ranks_per_node > 1 && !compute.layers.empty()) {
    auto beside = std::find_if(
        compute.layers.begin(), compute.layers.end(),
        [](const profile::LayerTime& l) { return l.layer == "block" && l.pass == "backward"; });
    if (beside == compute.layers.end()) beside = compute.layers.begin();
    for (const profile::CollectiveTime& c : largest)
      r.contention.push_back({c, *beside});
  }
  return r;
}

}  // namespace fsdpgen
