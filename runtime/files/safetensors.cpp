// safetensors: header validation, ranged reads with conversion to float, and
// the layout and ranged writes of parallel writers.
#include "runtime/files/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/dtype.h"
#include "runtime/files/file_io.h"

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

constexpr int64_t kMaxHeaderBytes = 100'000'000;  // the format's limit
constexpr int64_t kChunkBytes = 64 << 10;         // conversion buffer on the stack

// Element sizes of the format's dtypes (sub-byte types are not accepted).
std::optional<int64_t> dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  if (it == sizes.end()) return std::nullopt;
  return it->second;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(fmt::format("{}: {}", path, what));
}

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name,
                              const std::string& what) {
  throw std::runtime_error(fmt::format("{}: tensor '{}': {}", path, name, what));
}

// Closes a descriptor on every path out of a function.
struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

// A JSON value that is an integer in [0, 2^63).
std::optional<int64_t> as_count(const nlohmann::json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
  } else if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    return j.get<int64_t>();
  }
  return std::nullopt;
}

// One header entry, checked against the data section of data_bytes bytes.
// Returns the tensor with offset relative to the data start.
safetensors_tensor parse_entry(const std::string& path, const std::string& name,
                               const nlohmann::json& j, int64_t data_bytes) {
  safetensors_tensor t;
  t.name = name;
  if (!j.is_object()) fail_tensor(path, name, "entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) fail_tensor(path, name, fmt::format("missing \"{}\"", key));
  if (!j["dtype"].is_string()) fail_tensor(path, name, "\"dtype\" is not a string");
  t.dtype = j["dtype"].get<std::string>();
  const std::optional<int64_t> size = dtype_bytes(t.dtype);
  if (!size)
    fail_tensor(path, name,
                fmt::format("unknown dtype \"{}\" (known: BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, "
                            "U16, F16, BF16, I32, U32, F32, I64, U64, F64)",
                            t.dtype));
  const nlohmann::json& shape = j["shape"];
  if (!shape.is_array()) fail_tensor(path, name, "\"shape\" is not an array");
  int64_t elems = 1;
  for (const nlohmann::json& dim : shape) {
    const std::optional<int64_t> d = as_count(dim);
    if (!d)
      fail_tensor(path, name,
                  fmt::format("shape entry {} is not a non-negative integer", dim.dump()));
    t.shape.push_back(*d);
    if (__builtin_mul_overflow(elems, *d, &elems) || elems > data_bytes)
      elems = data_bytes + 1;  // too large for the file (unless a later dim is 0)
  }
  const nlohmann::json& offsets = j["data_offsets"];
  std::optional<int64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_count(offsets[0]);
    end = as_count(offsets[1]);
  }
  if (!begin || !end)
    fail_tensor(
        path, name,
        fmt::format("\"data_offsets\" {} is not two non-negative integers", offsets.dump()));
  if (*begin > *end)
    fail_tensor(path, name,
                fmt::format("data_offsets [{}, {}] end before they begin", *begin, *end));
  if (*end > data_bytes)
    fail_tensor(path, name,
                fmt::format("data_offsets [{}, {}] run past the end of the data ({} bytes)", *begin,
                            *end, data_bytes));
  t.offset = *begin;
  t.bytes = *end - *begin;
  if (elems > data_bytes)
    fail_tensor(path, name,
                fmt::format("shape {} of {} needs more bytes than the data section has ({})",
                            shape.dump(), t.dtype, data_bytes));
  if (elems * *size != t.bytes)
    fail_tensor(path, name,
                fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}",
                            shape.dump(), t.dtype, elems * *size, *begin, *end, t.bytes));
  return t;
}

// Converts n elements of dtype from bytes to floats.
void decode(const std::string& dtype, const unsigned char* bytes, int64_t n, float* out) {
  if (dtype == "F32") {
    std::memcpy(out, bytes, static_cast<size_t>(n) * 4);
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] = dtype == "BF16" ? bf16_to_float(bf16{h}) : fp16_to_float(fp16{h});
  }
}

void check_range(const std::string& path, const safetensors_tensor& t, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > t.elems())
    fail_tensor(path, t.name,
                fmt::format("element range [{}, {}) is outside [0, {})", begin, end, t.elems()));
}

}  // namespace

int64_t safetensors_tensor::elems() const {
  // A zero first: the dimensions before a 0 may multiply past 2^63.
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const safetensors_tensor* safetensors_file::find(std::string_view name) const {
  for (const safetensors_tensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

safetensors_file safetensors_open(const std::string& path) {
  safetensors_file file;
  file.path = path;
  fd_guard fd{file_open_regular(path)};
  struct stat st;
  if (fstat(fd.fd, &st) != 0) fail(path, fmt::format("cannot stat: {}", strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  file.file_bytes = st.st_size;
  if (file.file_bytes < 8)
    fail(path,
         fmt::format("file is {} bytes, too short for the 8-byte header length", file.file_bytes));
  uint64_t header_bytes;
  file_pread_all(fd.fd, path, &header_bytes, 8, 0, "the header length");
  if (header_bytes > static_cast<uint64_t>(kMaxHeaderBytes))
    fail(path, fmt::format("header length {} exceeds the format's limit of {} bytes", header_bytes,
                           kMaxHeaderBytes));
  if (8 + static_cast<int64_t>(header_bytes) > file.file_bytes)
    fail(path, fmt::format("header length {} runs past the end of the file ({} bytes)",
                           header_bytes, file.file_bytes));
  std::string text(header_bytes, '\0');
  file_pread_all(fd.fd, path, text.data(), static_cast<int64_t>(header_bytes), 8, "the header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
    fail(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  const int64_t data_start = 8 + static_cast<int64_t>(header_bytes);
  const int64_t data_bytes = file.file_bytes - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name != "__metadata__") {
      file.tensors.push_back(parse_entry(path, name, entry, data_bytes));
      continue;
    }
    if (!entry.is_object()) fail(path, "\"__metadata__\" is not a JSON object");
    for (const auto& [key, value] : entry.items()) {
      if (!value.is_string())
        fail(path, fmt::format("\"__metadata__\" value of \"{}\" is not a string", key));
      file.metadata[key] = value.get<std::string>();
    }
  }

  // The tensors must tile the data section exactly (no overlap, no gap).
  std::sort(file.tensors.begin(), file.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.offset, a.bytes, a.name) < std::tie(b.offset, b.bytes, b.name);
  });
  int64_t covered = 0;
  const safetensors_tensor* previous = nullptr;
  for (safetensors_tensor& t : file.tensors) {
    if (t.offset < covered)
      fail_tensor(path, t.name,
                  fmt::format("data_offsets [{}, {}] overlap tensor '{}' (which ends at {})",
                              t.offset, t.offset + t.bytes, previous->name, covered));
    if (t.offset > covered)
      fail(path, fmt::format("data bytes [{}, {}) before tensor '{}' belong to no tensor", covered,
                             t.offset, t.name));
    covered = t.offset + t.bytes;
    previous = &t;
    t.offset += data_start;
  }
  if (covered != data_bytes)
    fail(path, fmt::format("data section is {} bytes but the tensors cover only {}", data_bytes,
                           covered));
  return file;
}

void safetensors_read(const safetensors_file& file, const safetensors_tensor& t, int64_t begin,
                      int64_t end, float* out) {
  const std::string& path = file.path;
  check_range(path, t, begin, end);
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail_tensor(path, t.name,
                fmt::format("dtype {} cannot be read as float (F32, BF16, F16 can)", t.dtype));
  const int64_t size = *dtype_bytes(t.dtype);
  fd_guard fd{file_open_regular(path)};
  unsigned char chunk[kChunkBytes];
  const int64_t per_chunk = kChunkBytes / size;
  for (int64_t i = begin; i < end; i += per_chunk) {
    const int64_t n = std::min(per_chunk, end - i);
    file_pread_all(fd.fd, path, chunk, n * size, t.offset + i * size,
                   fmt::format("tensor '{}'", t.name));
    decode(t.dtype, chunk, n, out + (i - begin));
  }
}

std::string safetensors_name_problem(std::string_view name) {
  if (name.empty()) return "empty";
  if (name == "__metadata__") return "reserved (the key of the header's metadata)";
  return "";
}

safetensors_layout safetensors_plan(const std::vector<safetensors_entry>& entries,
                                    const std::string& dtype,
                                    const std::map<std::string, std::string>& metadata) {
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw std::runtime_error(fmt::format(
        "safetensors_plan: dtype \"{}\" cannot be written (F32, BF16, F16 can)", dtype));
  const int64_t size = *dtype_bytes(dtype);
  safetensors_layout layout;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t data_bytes = 0;
  for (const safetensors_entry& e : entries) {
    std::string problem = safetensors_name_problem(e.name);
    if (problem.empty() && !names.insert(e.name).second) problem = "repeated";
    if (!problem.empty())
      throw std::runtime_error(
          fmt::format("safetensors_plan: tensor name '{}' is {}", e.name, problem));
    safetensors_tensor t{e.name, dtype, e.shape, data_bytes, 0};
    for (int64_t d : e.shape)
      if (d < 0)
        throw std::runtime_error(
            fmt::format("safetensors_plan: tensor '{}' has a negative dimension {}", e.name, d));
    t.bytes = t.elems() * size;
    header[e.name] = {
        {"dtype", dtype}, {"shape", e.shape}, {"data_offsets", {t.offset, t.offset + t.bytes}}};
    data_bytes += t.bytes;
    layout.tensors.push_back(std::move(t));
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("safetensors_plan: {}", e.what()));
  }
  json.append((8 - json.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t json_bytes = json.size();
  layout.header.assign(reinterpret_cast<const char*>(&json_bytes), 8);
  layout.header += json;
  const int64_t data_start = static_cast<int64_t>(layout.header.size());
  for (safetensors_tensor& t : layout.tensors)
    t.offset += data_start;
  layout.file_bytes = data_start + data_bytes;
  return layout;
}

void safetensors_write_header(int fd, const std::string& path, const safetensors_layout& layout) {
  file_pwrite_all(fd, path, layout.header.data(), static_cast<int64_t>(layout.header.size()), 0,
                  "the header");
  if (::ftruncate(fd, layout.file_bytes) != 0)
    fail(path, fmt::format("cannot set the file length to {} bytes: {}", layout.file_bytes,
                           strerror(errno)));
}

void safetensors_write(int fd, const std::string& path, const safetensors_tensor& t, int64_t begin,
                       int64_t end, const float* values) {
  check_range(path, t, begin, end);
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    fail_tensor(path, t.name,
                fmt::format("dtype {} cannot be written (F32, BF16, F16 can)", t.dtype));
  const std::string what = fmt::format("tensor '{}'", t.name);
  if (t.dtype == "F32") {
    file_pwrite_all(fd, path, values, (end - begin) * 4, t.offset + begin * 4, what);
    return;
  }
  uint16_t chunk[kChunkBytes / 2];
  const int64_t per_chunk = kChunkBytes / 2;
  for (int64_t i = begin; i < end; i += per_chunk) {
    const int64_t n = std::min(per_chunk, end - i);
    for (int64_t k = 0; k < n; k++) {
      const float v = values[i - begin + k];
      if (t.dtype == "F16" && std::isfinite(v) && std::fabs(v) > 65504.0f)
        fail_tensor(path, t.name,
                    fmt::format("element {} is {}, beyond F16's largest finite value 65504 "
                                "(write F32 or BF16)",
                                i + k, v));
      chunk[k] = t.dtype == "BF16" ? bf16_from_float(v).bits : fp16_from_float(v).bits;
    }
    file_pwrite_all(fd, path, chunk, n * 2, t.offset + i * 2, what);
  }
}
