// checkpoint_files: manifest, listing and CRC-checked reads of checkpoints.
#include "runtime/files/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/file_io.h"
#include "runtime/files/safetensors.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kStepPrefix = "step_";

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what);
}

// The most steps and sequences a manifest may record: far past any run, and
// small enough that the data position's arithmetic stays in int64.
constexpr int64_t kMaxSteps = int64_t{1} << 40;
constexpr int64_t kMaxSequences = int64_t{1} << 48;

// a * b, or an error naming `what` (the manifest and field) when the product
// overflows int64.
int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r))
    fail(fmt::format("{}: {} x {} overflows 64 bits", what, a, b));
  return r;
}

// Parses "step_NNNNNNNN" (exactly); -1 otherwise.
int64_t step_of_name(const std::string& name) {
  const size_t n = std::strlen(kStepPrefix);
  if (name.size() <= n || name.compare(0, n, kStepPrefix) != 0) return -1;
  int64_t v = 0;
  for (size_t i = n; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || v > (int64_t{1} << 50)) return -1;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

// Whether T is read from JSON whole numbers: an integer, or a vector of them.
template <class T>
struct whole_numbers : std::bool_constant<std::is_integral_v<T> && !std::is_same_v<T, bool>> {};
template <class T>
struct whole_numbers<std::vector<T>> : whole_numbers<T> {};

// Field `key` of object j as T, or an error naming the file and the key.
template <class T>
T get(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) fail(fmt::format("{}: missing \"{}\"", where, key));
  // A whole-number field (or list of them) must be written as one: nlohmann
  // converts 1e19 to int64_t by a cast out of range (undefined behaviour).
  if constexpr (whole_numbers<T>::value) {
    const bool floats = it->is_number_float() ||
                        (it->is_array() && std::any_of(it->begin(), it->end(), [](const json& x) {
                           return x.is_number_float();
                         }));
    if (floats)
      fail(fmt::format("{}: \"{}\" must be whole numbers, not {}", where, key, it->dump()));
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    fail(fmt::format("{}: \"{}\" has the wrong type ({})", where, key, it->type_name()));
  }
}

const json& array_of(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array())
    fail(fmt::format("{}: \"{}\" must be an array", where, key));
  return *it;
}

// Elements of a unit's section: its weights, or its state planes (the
// product is checked when the unit is read).
int64_t section_elems(const checkpoint_unit& u, const std::string& what) {
  return what == "weights" ? u.shard_elems : u.state_planes * u.shard_elems;
}

}  // namespace

int64_t checkpoint_tensor::elems() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string checkpoint_step_dir(const std::string& dir, int64_t step) {
  return (fs::path(dir) / fmt::format("{}{:08}", kStepPrefix, step)).string();
}

namespace {

constexpr const char* kPartialSuffix = ".partial";

// The step directories directly inside dir, oldest first: complete ones
// (named step_N, with a manifest), or partial ones (step_N.partial).
std::vector<std::string> list_steps(const std::string& dir, bool partial) {
  const std::string suffix = partial ? kPartialSuffix : "";
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const int64_t step = step_of_name(name.substr(0, name.size() - suffix.size()));
    if (step >= 0 && (partial || fs::is_regular_file(e.path() / kCheckpointManifest, ec)))
      found.emplace_back(step, e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found)
    out.push_back(f.second);
  return out;
}

}  // namespace

std::string checkpoint_partial_dir(const std::string& step_dir) {
  return step_dir + kPartialSuffix;
}

std::vector<std::string> checkpoint_list(const std::string& dir) {
  return list_steps(dir, false);
}

std::vector<std::string> checkpoint_list_partial(const std::string& dir) {
  return list_steps(dir, true);
}

std::string checkpoint_resolve(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(path) / kCheckpointManifest, ec)) return path;
  if (!fs::is_directory(path, ec))
    fail(fmt::format("{}: no such checkpoint or checkpoint directory", path));
  const std::vector<std::string> all = checkpoint_list(path);
  if (all.empty())
    fail(fmt::format("{}: no complete checkpoint in it (a step_NNNNNNNN directory with {})", path,
                     kCheckpointManifest));
  return all.back();
}

uint32_t checkpoint_crc32(uint32_t crc, const void* data, int64_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uLong c = crc;
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<int64_t>(n, 1 << 30));
    c = ::crc32(c, p, chunk);
    p += chunk, n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

std::string checkpoint_manifest_text(const checkpoint_manifest& m) {
  json units = json::array();
  for (const checkpoint_unit& u : m.units) {
    json tensors = json::array();
    for (const checkpoint_tensor& t : u.tensors)
      tensors.push_back({{"name", t.name}, {"offset", t.offset}, {"shape", t.shape}});
    units.push_back({{"name", u.name},
                     {"param_elems", u.param_elems},
                     {"shard_elems", u.shard_elems},
                     {"state_planes", u.state_planes},
                     {"tensors", tensors}});
  }
  json shards = json::array();
  for (const checkpoint_shard& s : m.shards) {
    json sections = json::array();
    for (const checkpoint_section& x : s.sections)
      sections.push_back({{"unit", x.unit},
                          {"what", x.what},
                          {"offset", x.offset},
                          {"bytes", x.bytes},
                          {"crc32", x.crc32}});
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"sections", sections}});
  }
  // Keys in this order (nlohmann's ordered_json keeps insertion order).
  nlohmann::ordered_json j;
  j["format"] = "fsdpgen-checkpoint";
  j["version"] = m.version;
  j["model"] = m.model;
  j["spec"] = m.spec;
  j["step"] = m.step;
  j["sequences"] = m.sequences;
  j["world"] = m.world;
  j["shard_group"] = m.shard_group;
  j["optimizer"] = m.optimizer;
  j["seed"] = m.seed;
  j["data"] = m.data;
  j["loss_scale"] = {{"enabled", m.loss_scale_enabled},
                     {"scale", m.loss_scale},
                     {"finite_steps", m.loss_scale_finite_steps}};
  j["applied_steps"] = m.applied_steps;
  if (!m.guard_losses.empty() || m.guard_skips_in_row > 0)
    j["guard"] = {{"losses", m.guard_losses},
                  {"norms", m.guard_norms},
                  {"skips_in_row", m.guard_skips_in_row}};
  if (m.has_run) {
    const checkpoint_run& r = m.run;
    j["run"] = {{"steps", r.steps},
                {"data", r.data},
                {"shuffle", r.shuffle},
                {"val", r.val},
                {"val_every", r.val_every},
                {"val_sequences", r.val_sequences},
                {"checkpoint_every", r.checkpoint_every},
                {"checkpoint_dir", r.checkpoint_dir},
                {"checkpoint_keep", r.checkpoint_keep},
                {"log_every", r.log_every},
                {"save", r.save},
                {"metrics", r.metrics},
                {"micro_batch", r.micro_batch},
                {"micro_batches", r.micro_batches}};
  }
  j["dtype"] = "F32";
  j["units"] = units;
  j["shards"] = shards;
  return j.dump(1) + "\n";
}

checkpoint_manifest checkpoint_manifest_read(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCheckpointManifest).string();
  std::string text;
  try {
    text = file_read_whole(path, kJsonFileMaxBytes);
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (why.rfind(path + ": ", 0) == 0) why.erase(0, path.size() + 2);
    fail(fmt::format("{}: not a checkpoint (cannot read {}: {})", dir, kCheckpointManifest, why));
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(fmt::format("{}: not valid JSON (byte {}): {}", path, e.byte, e.what()));
  } catch (const json::exception& e) {  // out_of_range: a number such as 1e400
    fail(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  if (!j.is_object()) fail(fmt::format("{}: not a JSON object", path));
  if (get<std::string>(j, "format", path) != "fsdpgen-checkpoint")
    fail(fmt::format("{}: \"format\" is not \"fsdpgen-checkpoint\"", path));
  checkpoint_manifest m;
  m.version = get<int>(j, "version", path);
  if (m.version != kCheckpointVersion)
    fail(fmt::format("{}: checkpoint format version {}, this build reads version {}", path,
                     m.version, kCheckpointVersion));
  if (get<std::string>(j, "dtype", path) != "F32")
    fail(fmt::format("{}: \"dtype\" must be \"F32\"", path));
  m.model = get<std::string>(j, "model", path);
  m.spec = get<std::string>(j, "spec", path);
  m.step = get<int64_t>(j, "step", path);
  m.sequences = get<int64_t>(j, "sequences", path);
  m.world = get<int64_t>(j, "world", path);
  m.shard_group = get<int64_t>(j, "shard_group", path);
  m.optimizer = get<std::string>(j, "optimizer", path);
  m.seed = get<int64_t>(j, "seed", path);
  m.data = get<std::string>(j, "data", path);
  if (m.step < 0 || m.step > kMaxSteps || m.sequences < 0 || m.sequences > kMaxSequences ||
      m.world < 1 || m.shard_group < 1 || m.world % m.shard_group != 0)
    fail(fmt::format("{}: bad step {}, sequences {}, world {} or shard group {}", path, m.step,
                     m.sequences, m.world, m.shard_group));
  if (m.optimizer != "adamw" && m.optimizer != "sgd" && m.optimizer != "muon")
    fail(fmt::format("{}: unknown optimizer \"{}\"", path, m.optimizer));
  auto ls = j.find("loss_scale");
  if (ls == j.end() || !ls->is_object())
    fail(fmt::format("{}: \"loss_scale\" must be an object", path));
  m.loss_scale_enabled = get<bool>(*ls, "enabled", path + ": loss_scale");
  m.loss_scale = get<double>(*ls, "scale", path + ": loss_scale");
  m.loss_scale_finite_steps = get<int64_t>(*ls, "finite_steps", path + ": loss_scale");
  m.applied_steps = get<int64_t>(j, "applied_steps", path);
  if (!(m.loss_scale > 0) || m.loss_scale_finite_steps < 0 || m.applied_steps < 0 ||
      m.applied_steps > m.step)
    fail(fmt::format("{}: bad loss scale {}, finite steps {} or applied steps {}", path,
                     m.loss_scale, m.loss_scale_finite_steps, m.applied_steps));
  if (auto g = j.find("guard"); g != j.end()) {
    const std::string where = path + ": guard";
    if (!g->is_object()) fail(fmt::format("{} must be an object", where));
    m.guard_losses = get<std::vector<double>>(*g, "losses", where);
    m.guard_norms = get<std::vector<double>>(*g, "norms", where);
    m.guard_skips_in_row = get<int64_t>(*g, "skips_in_row", where);
    const bool finite = std::all_of(m.guard_losses.begin(), m.guard_losses.end(),
                                    [](double v) { return std::isfinite(v); }) &&
                        std::all_of(m.guard_norms.begin(), m.guard_norms.end(),
                                    [](double v) { return std::isfinite(v); });
    if (m.guard_losses.size() != m.guard_norms.size() || !finite || m.guard_skips_in_row < 0 ||
        static_cast<int64_t>(m.guard_losses.size()) > m.applied_steps)
      fail(fmt::format(
          "{}: \"losses\" and \"norms\" must be as long as each other ({} and {}), finite, and "
          "no more than the applied steps ({}), \"skips_in_row\" not negative ({})",
          where, m.guard_losses.size(), m.guard_norms.size(), m.applied_steps,
          m.guard_skips_in_row));
  }

  if (auto run = j.find("run"); run != j.end()) {
    const std::string where = path + ": run";
    if (!run->is_object()) fail(fmt::format("{} must be an object", where));
    checkpoint_run& r = m.run;
    m.has_run = true;
    r.steps = get<int64_t>(*run, "steps", where);
    r.data = get<std::vector<std::string>>(*run, "data", where);
    r.shuffle = get<bool>(*run, "shuffle", where);
    r.val = get<std::vector<std::string>>(*run, "val", where);
    r.val_every = get<int64_t>(*run, "val_every", where);
    r.val_sequences = get<int64_t>(*run, "val_sequences", where);
    r.checkpoint_every = get<int64_t>(*run, "checkpoint_every", where);
    r.checkpoint_dir = get<std::string>(*run, "checkpoint_dir", where);
    r.checkpoint_keep = get<int64_t>(*run, "checkpoint_keep", where);
    r.log_every = get<int64_t>(*run, "log_every", where);
    r.save = get<std::string>(*run, "save", where);
    r.metrics = get<std::string>(*run, "metrics", where);
    r.micro_batch = get<int64_t>(*run, "micro_batch", where);
    r.micro_batches = get<int64_t>(*run, "micro_batches", where);
    if (r.steps < m.step || r.steps > kMaxSteps || r.val_every < 0 || r.val_sequences < 0 ||
        r.checkpoint_every < 0 || r.checkpoint_keep < 1 || r.log_every < 1 || r.micro_batch < 1 ||
        r.micro_batches < 1 || r.micro_batch > (int64_t{1} << 30) ||
        r.micro_batches > (int64_t{1} << 30))
      fail(fmt::format(
          "{}: bad steps {} (the checkpoint is at step {}), val_every {}, val_sequences {}, "
          "checkpoint_every {}, checkpoint_keep {}, log_every {}, micro_batch {} or "
          "micro_batches {}",
          where, r.steps, m.step, r.val_every, r.val_sequences, r.checkpoint_every,
          r.checkpoint_keep, r.log_every, r.micro_batch, r.micro_batches));
  }

  // Each tensor's name is a safetensors name (merge and --save write them as
  // such), once in the checkpoint: where it was first seen, for the message.
  std::map<std::string, std::string> named;
  for (const json& ju : array_of(j, "units", path)) {
    const std::string where = fmt::format("{}: unit {}", path, m.units.size());
    checkpoint_unit u;
    u.name = get<std::string>(ju, "name", where);
    u.param_elems = get<int64_t>(ju, "param_elems", where);
    u.shard_elems = get<int64_t>(ju, "shard_elems", where);
    u.state_planes = get<int64_t>(ju, "state_planes", where);
    if (u.param_elems < 0 || u.shard_elems < 0 || u.state_planes < 0 || u.state_planes > 2)
      fail(fmt::format("{}: bad sizes (param_elems {}, shard_elems {} x {} ranks, {} state planes)",
                       where, u.param_elems, u.shard_elems, m.shard_group, u.state_planes));
    // The unit's flat parameter and its sections' bytes fit int64.
    const int64_t flat_elems = checked_mul(u.shard_elems, m.shard_group, where + ": shard_elems");
    checked_mul(4 * (1 + u.state_planes), u.shard_elems, where + ": shard_elems");
    if (flat_elems < u.param_elems)
      fail(fmt::format("{}: bad sizes (param_elems {}, shard_elems {} x {} ranks, {} state planes)",
                       where, u.param_elems, u.shard_elems, m.shard_group, u.state_planes));
    for (const json& jt : array_of(ju, "tensors", where)) {
      checkpoint_tensor t;
      t.name = get<std::string>(jt, "name", where);
      const std::string tensor_at = fmt::format("{} tensor {}", where, u.tensors.size());
      if (const std::string problem = safetensors_name_problem(t.name); !problem.empty())
        fail(fmt::format("{}: \"name\" \"{}\" is {}", tensor_at, t.name, problem));
      if (auto [it, fresh] = named.emplace(t.name, tensor_at); !fresh)
        fail(fmt::format("{}: \"name\" \"{}\" is repeated ({} has it)", tensor_at, t.name,
                         it->second.substr(path.size() + 2)));
      t.offset = get<int64_t>(jt, "offset", where + " tensor " + t.name);
      t.shape = get<std::vector<int64_t>>(jt, "shape", where + " tensor " + t.name);
      if (t.shape.empty() || std::any_of(t.shape.begin(), t.shape.end(),
                                         [](int64_t d) { return d < 1 || d > (1LL << 40); }))
        fail(fmt::format("{} tensor {}: bad shape", where, t.name));
      int64_t elems = 1;
      for (int64_t d : t.shape)
        elems = checked_mul(elems, d, fmt::format("{} tensor {}: shape", where, t.name));
      // Inside the flat parameter, which holds alignment gaps, the zero rows of
      // a padded vocabulary and shard padding besides the param_elems.
      if (t.offset < 0 || t.offset > flat_elems || elems > flat_elems - t.offset) {
        int64_t end = 0;
        fail(fmt::format(
            "{} tensor {}: elements [{}, {}) outside the unit's flat {}", where, t.name, t.offset,
            __builtin_add_overflow(t.offset, elems, &end) ? std::string("2^63 and past")
                                                          : std::to_string(end),
            flat_elems));
      }
      u.tensors.push_back(std::move(t));
    }
    m.units.push_back(std::move(u));
  }

  for (const json& js : array_of(j, "shards", path)) {
    const std::string where = fmt::format("{}: shard {}", path, m.shards.size());
    checkpoint_shard s;
    s.file = get<std::string>(js, "file", where);
    s.bytes = get<int64_t>(js, "bytes", where);
    if (s.file.empty() || s.file.find('/') != std::string::npos || s.file[0] == '.')
      fail(fmt::format("{}: bad file name \"{}\"", where, s.file));
    int64_t at = 0;
    for (const json& jx : array_of(js, "sections", where)) {
      checkpoint_section x;
      x.unit = get<int>(jx, "unit", where);
      x.what = get<std::string>(jx, "what", where);
      x.offset = get<int64_t>(jx, "offset", where);
      x.bytes = get<int64_t>(jx, "bytes", where);
      x.crc32 = get<uint32_t>(jx, "crc32", where);
      if (x.unit < 0 || x.unit >= static_cast<int>(m.units.size()) ||
          (x.what != "weights" && x.what != "state"))
        fail(fmt::format("{}: bad section (unit {}, \"{}\")", where, x.unit, x.what));
      if (x.offset != at ||
          x.bytes != 4 * section_elems(m.units[static_cast<size_t>(x.unit)], x.what))
        fail(
            fmt::format("{}: section {} of unit {} at byte {} ({} bytes) does not follow the "
                        "layout (expected byte {}, {} bytes)",
                        where, x.what, x.unit, x.offset, x.bytes, at,
                        4 * section_elems(m.units[static_cast<size_t>(x.unit)], x.what)));
      if (__builtin_add_overflow(at, x.bytes, &at))
        fail(fmt::format("{}: its sections' bytes overflow 64 bits", where));
      s.sections.push_back(std::move(x));
    }
    if (at != s.bytes)
      fail(fmt::format("{}: sections cover {} bytes of the file's {}", where, at, s.bytes));
    // The file as it is, before a reader allocates for a section of it.
    std::error_code ec;
    const fs::path file = fs::path(dir) / s.file;
    const uintmax_t size = fs::file_size(file, ec);
    if (ec) fail(fmt::format("{}: \"file\" {}: {}", where, file.string(), ec.message()));
    if (size != static_cast<uintmax_t>(s.bytes))
      fail(fmt::format("{}: \"bytes\" is {}, but {} has {} bytes (truncated or replaced?)", where,
                       s.bytes, file.string(), size));
    m.shards.push_back(std::move(s));
  }
  if (static_cast<int64_t>(m.shards.size()) != m.shard_group)
    fail(fmt::format("{}: {} shard files listed for a shard group of {}", path, m.shards.size(),
                     m.shard_group));
  return m;
}

checkpoint_reader::checkpoint_reader(std::string dir, checkpoint_manifest manifest)
    : dir_(std::move(dir)), m_(std::move(manifest)) {}
checkpoint_reader::~checkpoint_reader() = default;

void checkpoint_reader::weights(int unit, int64_t begin, int64_t end, float* out) {
  read(unit, "weights", 0, begin, end, out);
}

void checkpoint_reader::state(int unit, int plane, int64_t begin, int64_t end, float* out) {
  const checkpoint_unit& u = m_.units.at(static_cast<size_t>(unit));
  if (plane < 0 || plane >= u.state_planes)
    fail(fmt::format("{}: unit {} has {} optimizer state planes, not {}", dir_, u.name,
                     u.state_planes, plane + 1));
  read(unit, "state", plane, begin, end, out);
}

void checkpoint_reader::read(int unit, const char* what, int64_t plane, int64_t begin, int64_t end,
                             float* out) {
  const checkpoint_unit& u = m_.units.at(static_cast<size_t>(unit));
  const int64_t flat_elems = u.shard_elems * m_.shard_group;
  if (begin < 0 || end > flat_elems || begin > end)
    fail(fmt::format("{}: unit {}: elements [{}, {}) outside its flat {}", dir_, u.name, begin, end,
                     flat_elems));
  if (unit != cached_unit_) cache_.clear(), cached_unit_ = unit;
  for (int64_t i = begin; i < end;) {
    const int64_t shard = i / u.shard_elems;
    const int64_t lo = shard * u.shard_elems, hi = std::min(end, lo + u.shard_elems);
    const std::vector<float>& s = section(static_cast<int>(shard), unit, what);
    std::memcpy(out + (i - begin), s.data() + plane * u.shard_elems + (i - lo),
                static_cast<size_t>(hi - i) * 4);
    i = hi;
  }
}

const std::vector<float>& checkpoint_reader::section(int shard, int unit, const char* what) {
  auto key = std::make_pair(shard, std::string(what));
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second;
  const checkpoint_shard& s = m_.shards.at(static_cast<size_t>(shard));
  const checkpoint_section* x = nullptr;
  for (const checkpoint_section& c : s.sections)
    if (c.unit == unit && c.what == what) x = &c;
  const std::string path = (fs::path(dir_) / s.file).string();
  if (!x)
    fail(fmt::format("{}: no {} section for unit {}", path, what,
                     m_.units[static_cast<size_t>(unit)].name));
  const int fd = file_open_regular(path);
  std::vector<float> values;
  try {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size != s.bytes)
      fail(fmt::format("{}: {} bytes, the manifest says {} (truncated or replaced?)", path,
                       static_cast<int64_t>(st.st_size), s.bytes));
    values.resize(static_cast<size_t>(x->bytes / 4));  // the file holds them: checked above
    file_pread_all(fd, path, values.data(), x->bytes, x->offset,
                   fmt::format("{} of unit {}", what, m_.units[static_cast<size_t>(unit)].name));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  const uint32_t crc = checkpoint_crc32(0, values.data(), x->bytes);
  if (crc != x->crc32)
    fail(
        fmt::format("{}: {} of unit {} (bytes {}..{}) fails its checksum (CRC-32 {:08x}, the "
                    "manifest says {:08x}): the file is corrupt",
                    path, what, m_.units[static_cast<size_t>(unit)].name, x->offset,
                    x->offset + x->bytes, crc, x->crc32));
  return cache_.emplace(std::move(key), std::move(values)).first->second;
}
