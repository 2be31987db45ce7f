// profile: JSON out and in, every field checked and every error located.
#include "runtime/profile/profile.h"
#include "runtime/files/file_io.h"
#include "runtime/limits.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fsdpgen::profile {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kDtypes[] = {"fp32", "bf16", "fp16"};
constexpr std::string_view kKinds[] = {"cpu", "cuda"};
constexpr std::string_view kLayers[] = {"embed", "block", "head"};
constexpr std::string_view kPasses[] = {"forward", "recompute", "backward"};
constexpr std::string_view kElementwise[] = {"adamw", "sgd", "grad_norm", "convert"};
constexpr std::string_view kNsDtypes[] = {"fp32", "bf16"};  // runtime/cpu/muon.h's
constexpr std::string_view kCollectives[] = {"all_gather", "reduce_scatter", "all_reduce",
                                             "send_recv"};
constexpr std::string_view kCopies[] = {"h2d", "d2h"};

template <size_t N>
bool one_of(std::string_view s, const std::string_view (&names)[N]) {
  for (std::string_view n : names)
    if (s == n) return true;
  return false;
}

template <size_t N>
std::string choices(const std::string_view (&names)[N]) {
  std::string s;
  for (std::string_view n : names)
    s += fmt::format("{}'{}'", s.empty() ? "" : ", ", n);
  return s;
}

// A JSON value and where it is ("compute[0].layers[3]"), for located errors.
class Reader {
 public:
  Reader(const json& v, std::string file, std::string where)
      : v_(v), file_(std::move(file)), where_(std::move(where)) {}

  [[noreturn]] void fail(std::string_view what) const {
    throw ProfileError(fmt::format("{}: {}{}{}", file_, where_, where_.empty() ? "" : ": ", what));
  }

  Reader field(std::string_view key) const {
    if (!v_.is_object()) fail("must be an object");
    auto it = v_.find(std::string(key));
    const std::string at = where_.empty() ? std::string(key) : where_ + "." + std::string(key);
    if (it == v_.end()) Reader(v_, file_, at).fail("missing");
    return Reader(*it, file_, at);
  }
  bool has(std::string_view key) const { return v_.is_object() && v_.contains(std::string(key)); }
  // Every key of this object is one of `known` (a misspelt key is an error,
  // not silently ignored).
  void only(std::initializer_list<std::string_view> known) const {
    if (!v_.is_object()) fail("must be an object");
    for (auto it = v_.begin(); it != v_.end(); ++it) {
      bool ok = false;
      for (std::string_view k : known)
        ok = ok || it.key() == k;
      if (!ok) {
        std::string list;
        for (std::string_view k : known)
          list += fmt::format("{}'{}'", list.empty() ? "" : ", ", k);
        fail(fmt::format("unknown field '{}' (known: {})", it.key(), list));
      }
    }
  }
  std::vector<Reader> items() const {
    if (!v_.is_array()) fail("must be an array");
    std::vector<Reader> out;
    for (size_t i = 0; i < v_.size(); ++i)
      out.emplace_back(v_[i], file_, fmt::format("{}[{}]", where_, i));
    return out;
  }
  std::string text() const {
    if (!v_.is_string()) fail("must be a string");
    return v_.get<std::string>();
  }
  template <size_t N>
  std::string word(const std::string_view (&names)[N]) const {
    std::string s = text();
    if (!one_of(s, names)) fail(fmt::format("'{}' is not one of {}", s, choices(names)));
    return s;
  }
  int64_t integer(int64_t min) const {
    if (!v_.is_number_integer()) fail("must be an integer");
    const int64_t x = v_.get<int64_t>();
    if (x < min) fail(fmt::format("must be at least {}, not {}", min, x));
    return x;
  }
  // Seconds: finite, positive (zero allowed in a request).
  double seconds(bool measured) const {
    if (!v_.is_number()) fail("must be a number");
    const double x = v_.get<double>();
    if (!std::isfinite(x) || x < 0 || (measured && x == 0))
      fail(fmt::format("must be a {} number of seconds, not {}", measured ? "positive" : "finite",
                       v_.dump()));
    return x;
  }
  std::map<std::string, int64_t> dims() const {
    if (!v_.is_object() || v_.empty()) fail("must be a non-empty object of integer dimensions");
    std::map<std::string, int64_t> out;
    for (auto it = v_.begin(); it != v_.end(); ++it)
      out[it.key()] = field(it.key()).integer(0);
    return out;
  }

 private:
  const json& v_;
  std::string file_;
  std::string where_;
};

ordered_json layer_json(const LayerTime& l) {
  ordered_json dims = ordered_json::object();
  for (const auto& [k, v] : l.dims)
    dims[k] = v;
  ordered_json j = {{"family", l.family}, {"layer", l.layer}, {"pass", l.pass}, {"dtype", l.dtype}};
  if (!l.grad_dtype.empty()) j["grad_dtype"] = l.grad_dtype;
  j["dims"] = std::move(dims);
  j["seconds"] = l.seconds;
  j["runs"] = l.runs;
  return j;
}

LayerTime layer_from(const Reader& r, bool measured) {
  r.only({"family", "layer", "pass", "dtype", "grad_dtype", "dims", "seconds", "runs"});
  LayerTime l;
  l.family = r.field("family").text();
  l.layer = r.field("layer").word(kLayers);
  l.pass = r.field("pass").word(kPasses);
  l.dtype = r.field("dtype").word(kDtypes);
  if (r.has("grad_dtype")) l.grad_dtype = r.field("grad_dtype").word(kDtypes);
  if (l.pass == "backward" && l.grad_dtype.empty())
    r.field("grad_dtype");  // missing: reported as such
  l.dims = r.field("dims").dims();
  l.seconds = r.field("seconds").seconds(measured);
  l.runs = r.field("runs").integer(measured ? 1 : 0);
  return l;
}

MuonNsTime muon_ns_from(const Reader& r, bool measured) {
  r.only({"rows", "cols", "ns_steps", "ns_dtype", "seconds", "runs"});
  MuonNsTime m;
  m.rows = r.field("rows").integer(1);
  m.cols = r.field("cols").integer(1);
  m.ns_steps = r.field("ns_steps").integer(0);
  if (m.ns_steps > kMaxMuonNsSteps)
    r.field("ns_steps")
        .fail(fmt::format("must be at most {}, not {}", kMaxMuonNsSteps, m.ns_steps));
  m.ns_dtype = r.field("ns_dtype").word(kNsDtypes);
  m.seconds = r.field("seconds").seconds(measured);
  m.runs = r.field("runs").integer(measured ? 1 : 0);
  return m;
}

Compute compute_from(const Reader& r, bool measured) {
  r.only(
      {"ranks_per_node", "threads_per_rank", "op_overhead_s", "layers", "elementwise", "muon_ns"});
  Compute c;
  c.ranks_per_node = r.field("ranks_per_node").integer(1);
  c.threads_per_rank = r.field("threads_per_rank").integer(1);
  c.op_overhead_s = r.field("op_overhead_s").seconds(false);
  for (const Reader& l : r.field("layers").items())
    c.layers.push_back(layer_from(l, measured));
  for (const Reader& e : r.field("elementwise").items()) {
    e.only({"op", "dtype", "elems", "seconds", "runs"});
    c.elementwise.push_back({e.field("op").word(kElementwise), e.field("dtype").word(kDtypes),
                             e.field("elems").integer(1), e.field("seconds").seconds(measured),
                             e.field("runs").integer(measured ? 1 : 0)});
  }
  if (r.has("muon_ns"))  // profiles of specs without Muon have none
    for (const Reader& m : r.field("muon_ns").items())
      c.muon_ns.push_back(muon_ns_from(m, measured));
  return c;
}

ordered_json collective_json(const CollectiveTime& c) {
  return {{"op", c.op},       {"dtype", c.dtype},     {"ranks", c.ranks}, {"nodes", c.nodes},
          {"bytes", c.bytes}, {"seconds", c.seconds}, {"runs", c.runs}};
}

CollectiveTime collective_from(const Reader& r, bool measured) {
  r.only({"op", "dtype", "ranks", "nodes", "bytes", "seconds", "runs"});
  CollectiveTime c;
  c.op = r.field("op").word(kCollectives);
  c.dtype = r.field("dtype").word(kDtypes);
  c.ranks = r.field("ranks").integer(2);
  c.nodes = r.field("nodes").integer(1);
  if (c.nodes > c.ranks)
    r.field("nodes").fail(fmt::format("more nodes than its {} ranks", c.ranks));
  c.bytes = r.field("bytes").integer(1);
  c.seconds = r.field("seconds").seconds(measured);
  c.runs = r.field("runs").integer(measured ? 1 : 0);
  return c;
}

ContentionTime contention_from(const Reader& r, bool measured) {
  r.only({"collective", "layer"});
  ContentionTime c{collective_from(r.field("collective"), measured),
                   layer_from(r.field("layer"), measured)};
  if (c.collective.op == "send_recv")
    r.field("collective").field("op").fail("a contention entry times a collective, not send_recv");
  return c;
}

}  // namespace

bool is_dtype(std::string_view name) {
  return one_of(name, kDtypes);
}

std::string to_json(const Profile& p) {
  ordered_json compute = ordered_json::array();
  for (const Compute& c : p.compute) {
    ordered_json layers = ordered_json::array(), elementwise = ordered_json::array();
    for (const LayerTime& l : c.layers)
      layers.push_back(layer_json(l));
    for (const ElementwiseTime& e : c.elementwise)
      elementwise.push_back({{"op", e.op},
                             {"dtype", e.dtype},
                             {"elems", e.elems},
                             {"seconds", e.seconds},
                             {"runs", e.runs}});
    ordered_json section = {{"ranks_per_node", c.ranks_per_node},
                            {"threads_per_rank", c.threads_per_rank},
                            {"op_overhead_s", c.op_overhead_s},
                            {"layers", std::move(layers)},
                            {"elementwise", std::move(elementwise)}};
    if (!c.muon_ns.empty()) {
      ordered_json muon_ns = ordered_json::array();
      for (const MuonNsTime& m : c.muon_ns)
        muon_ns.push_back({{"rows", m.rows},
                           {"cols", m.cols},
                           {"ns_steps", m.ns_steps},
                           {"ns_dtype", m.ns_dtype},
                           {"seconds", m.seconds},
                           {"runs", m.runs}});
      section["muon_ns"] = std::move(muon_ns);
    }
    compute.push_back(std::move(section));
  }
  ordered_json collectives = ordered_json::array(), copies = ordered_json::array();
  for (const CollectiveTime& c : p.collectives)
    collectives.push_back(collective_json(c));
  for (const CopyTime& c : p.copies)
    copies.push_back({{"op", c.op}, {"bytes", c.bytes}, {"seconds", c.seconds}, {"runs", c.runs}});
  ordered_json j = {{"format", kFormat},
                    {"version", p.version},
                    {"written_by", p.written_by},
                    {"created", p.created},
                    {"sweep", p.sweep},
                    {"device",
                     {{"kind", p.device.kind},
                      {"name", p.device.name},
                      {"base", p.device.base},
                      {"cores", p.device.cores},
                      {"memory_bytes", p.device.memory_bytes}}},
                    {"compute", std::move(compute)},
                    {"collectives", std::move(collectives)},
                    {"copies", std::move(copies)}};
  if (!p.contention.empty()) {
    ordered_json contention = ordered_json::array();
    for (const ContentionTime& c : p.contention)
      contention.push_back(
          {{"collective", collective_json(c.collective)}, {"layer", layer_json(c.layer)}});
    j["contention"] = std::move(contention);
  }
  return j.dump(1) + "\n";
}

Profile from_json(std::string_view text, std::string_view file, bool measured) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400
    throw ProfileError(fmt::format("{}: not JSON: {}", file, e.what()));
  }
  const Reader r(j, std::string(file), "");
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != kFormat)
    r.fail(fmt::format("not an fsdpgen hardware profile (no \"format\": \"{}\")", kFormat));
  const int64_t version = r.field("version").integer(0);
  if (version != kVersion)
    r.field("version").fail(
        fmt::format("this profile has schema version {}; this fsdpgen reads version {} only: "
                    "run `fsdpgen calibrate` again to measure this machine",
                    version, kVersion));
  r.only({"format", "version", "written_by", "created", "sweep", "device", "compute", "collectives",
          "copies", "contention"});
  Profile p;
  p.written_by = r.field("written_by").text();
  p.created = r.field("created").text();
  p.sweep = r.field("sweep").text();
  const Reader d = r.field("device");
  d.only({"kind", "name", "base", "cores", "memory_bytes"});
  // A request's device is the calibration binary's to fill in, but its base.
  p.device = {d.field("kind").word(kKinds), d.field("name").text(), d.field("base").text(),
              d.field("cores").integer(measured ? 1 : 0),
              d.field("memory_bytes").integer(measured ? 1 : 0)};
  if (p.device.base.empty()) d.field("base").fail("must name a built-in hardware");
  for (const Reader& c : r.field("compute").items()) {
    p.compute.push_back(compute_from(c, measured));
    if (p.compute.size() > 1 &&
        p.compute.back().ranks_per_node <= p.compute[p.compute.size() - 2].ranks_per_node)
      c.field("ranks_per_node").fail("compute sections must be in ascending ranks_per_node");
  }
  for (const Reader& c : r.field("collectives").items())
    p.collectives.push_back(collective_from(c, measured));
  for (const Reader& c : r.field("copies").items()) {
    c.only({"op", "bytes", "seconds", "runs"});
    p.copies.push_back({c.field("op").word(kCopies), c.field("bytes").integer(1),
                        c.field("seconds").seconds(measured),
                        c.field("runs").integer(measured ? 1 : 0)});
  }
  if (r.has("contention")) {  // CPU profiles only
    if (p.device.kind != "cpu" && !j["contention"].empty())
      r.field("contention")
          .fail(fmt::format("measured on the CPU runtime only, but device.kind is '{}'",
                            p.device.kind));
    for (const Reader& c : r.field("contention").items())
      p.contention.push_back(contention_from(c, measured));
  }
  return p;
}

Profile load(const std::string& path, bool measured) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw ProfileError(
        fmt::format("{}: no such profile (write one with `fsdpgen calibrate -o {}`)", path, path));
  std::string text;
  try {
    text = file_read_whole(path, kJsonFileMaxBytes);
  } catch (const std::exception& e) {
    throw ProfileError(e.what());
  }
  return from_json(text, path, measured);
}

void save(const Profile& p, const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << to_json(p);
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      throw ProfileError(fmt::format("{}: cannot write it", path));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw ProfileError(fmt::format("{}: cannot write it: {}", path, ec.message()));
  }
}

}  // namespace fsdpgen::profile
