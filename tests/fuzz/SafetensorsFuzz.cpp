// libFuzzer target for the safetensors readers: the input as a .safetensors
// file (safetensors_open, then its float tensors read) and as a
// model.safetensors.index.json beside two shards of our own and the input
// file (safetensors_set_open). A bad file must be a std::runtime_error; a file
// that opens must keep the header's promises (each tensor's bytes inside the
// file, dtype x shape long, the tensors tiling the data), else we abort.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/files/safetensors.h"
#include "runtime/files/safetensors_set.h"
#include "tests/fuzz/Fuzz.h"

namespace {

using fuzz::check;

constexpr int64_t kMaxReadElems = int64_t{1} << 16;  // per tensor read back

int64_t dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"I64", 8}, {"U64", 8},     {"F64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// The shape's element count, or -1 when it does not fit in 63 bits.
int64_t shape_elems(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d == 0) return 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  return overflow ? -1 : n;
}

// Two shards written by the library's own writer, for indexes to name.
void write_shards() {
  static const bool written = [] {
    const std::vector<std::pair<std::string, std::vector<safetensors_entry>>> shards = {
        {"model-00001-of-00002.safetensors", {{"a", {2, 3}}, {"b", {4}}}},
        {"model-00002-of-00002.safetensors", {{"c", {3}}}}};
    for (const auto& [name, entries] : shards) {
      const std::string path = fuzz::scratch_dir() + "/" + name;
      const safetensors_layout layout = safetensors_plan(entries, "BF16", {{"format", "pt"}});
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) fuzz::harness_fail("cannot create " + path);
      safetensors_write_header(fd, path, layout);
      for (const safetensors_tensor& t : layout.tensors) {
        const std::vector<float> values(static_cast<size_t>(t.elems()), 1.5f);
        safetensors_write(fd, path, t, 0, t.elems(), values.data());
      }
      ::close(fd);
    }
    return true;
  }();
  (void)written;
}

void check_file(const safetensors_file& f, const uint8_t* data, size_t size) {
  check(f.file_bytes == static_cast<int64_t>(size), "file_bytes is the file's size");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, data, 8);
  int64_t at = 8 + static_cast<int64_t>(header_bytes);
  for (const safetensors_tensor& t : f.tensors) {
    const int64_t elems = shape_elems(t.shape);
    check(elems >= 0, "an accepted shape's element count fits in 63 bits");
    check(t.elems() == elems, "elems() is the shape's product");
    check(t.offset == at, "the tensors tile the data section in order");
    check(t.bytes == elems * dtype_size(t.dtype), "bytes is dtype size x elements");
    check(t.offset + t.bytes <= f.file_bytes, "a tensor's bytes lie inside the file");
    check(f.find(t.name) == &t, "find() returns the tensor of that name");
    at += t.bytes;
  }
  check(at == f.file_bytes, "the tensors cover the data section");

  for (const safetensors_tensor& t : f.tensors) {
    if ((t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16") || t.elems() > kMaxReadElems)
      continue;
    std::vector<float> values(static_cast<size_t>(t.elems()));
    safetensors_read(f, t, 0, t.elems(), values.data());
    const size_t size_of = static_cast<size_t>(dtype_size(t.dtype));
    for (size_t i = 0; i < values.size(); ++i) {
      const uint8_t* raw = data + t.offset + i * size_of;
      uint32_t f32 = 0;
      uint16_t half = 0;
      float want = 0;
      if (t.dtype == "F32") {
        std::memcpy(&f32, raw, 4);
        std::memcpy(&want, &f32, 4);
      } else {
        std::memcpy(&half, raw, 2);
        want = t.dtype == "BF16" ? bf16_to_float(bf16{half}) : fp16_to_float(fp16{half});
      }
      check(std::memcmp(&values[i], &want, 4) == 0, "a read element is the file's, converted");
    }
  }
}

void check_set(const safetensors_set& s) {
  for (const auto& [name, where] : s.where) {
    check(where.first < s.files.size(), "a tensor's file index is in range");
    const safetensors_file& f = s.files[where.first];
    check(where.second < f.tensors.size(), "a tensor's index is in range of its file");
    check(f.tensors[where.second].name == name, "where maps a name to that tensor");
    const auto [file, tensor] = s.find(name);
    check(file == &f && tensor == &f.tensors[where.second], "find() agrees with where");
  }
  check(s.tensor_count() == s.where.size(), "tensor_count() counts where");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_shards();
  const std::string file = fuzz::write_file("input.safetensors", data, size);
  try {
    check_file(safetensors_open(file), data, size);
  } catch (const std::runtime_error&) {
  }
  const std::string index = fuzz::write_file("model.safetensors.index.json", data, size);
  try {
    check_set(safetensors_set_open(index));
  } catch (const std::runtime_error&) {
  }
  return 0;
}
