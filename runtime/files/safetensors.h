// safetensors: Hugging Face's weights format, read (F32, BF16, F16 converted
// to float) and written in parallel by ranks that each own part of the data.
// Layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the data; offsets count from the data's start.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

struct safetensors_tensor {
  std::string name;
  std::string dtype;           // "F32", "BF16", "F16", ... as in the header
  std::vector<int64_t> shape;  // row-major
  int64_t offset = 0;          // absolute byte offset of the data in the file
  int64_t bytes = 0;
  int64_t elems() const;
};

struct safetensors_file {
  std::string path;
  std::vector<safetensors_tensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  int64_t file_bytes = 0;
  const safetensors_tensor* find(std::string_view name) const;  // nullptr when absent
};

// Reads and validates the header (length within 100 MB and the file, JSON, a
// known dtype and integer shape for each tensor, data_offsets spanning exactly
// shape * dtype size, tensors covering the data without gaps or overlaps, as
// the format requires). Throws std::runtime_error naming the path, the tensor
// and the problem.
safetensors_file safetensors_open(const std::string& path);

// out[0, end - begin) = elements [begin, end) of the tensor, converted to
// float from F32, BF16 or F16; reads only those bytes.
void safetensors_read(const safetensors_file& file, const safetensors_tensor& tensor, int64_t begin,
                      int64_t end, float* out);

// Writing. Every rank plans the same layout; one rank writes the header (and
// sizes the file), and each rank writes its elements of each tensor, in any
// order, through its own descriptor of the same file (opened without O_TRUNC).
struct safetensors_entry {
  std::string name;
  std::vector<int64_t> shape;
};

struct safetensors_layout {
  std::string header;                       // length field + JSON, padded with spaces to 8 bytes
  std::vector<safetensors_tensor> tensors;  // in entry order, data packed in that order
  int64_t file_bytes = 0;
};

// Why `name` cannot name a tensor of a safetensors header: "empty", or
// "reserved (...)" for __metadata__, the header's metadata key; "" when it
// can. A header also holds each name once.
std::string safetensors_name_problem(std::string_view name);

// dtype is "F32", "BF16" or "F16". Deterministic: the JSON lists "__metadata__" and
// then the entries in order. Hugging Face transformers expects metadata
// {"format": "pt"}.
safetensors_layout safetensors_plan(const std::vector<safetensors_entry>& entries,
                                    const std::string& dtype,
                                    const std::map<std::string, std::string>& metadata);

// Writes the header at offset 0 and sets the file's length to file_bytes.
void safetensors_write_header(int fd, const std::string& path, const safetensors_layout& layout);

// Writes elements [begin, end) of the tensor from values[0, end - begin),
// converted to the tensor's dtype (bf16 rounds to nearest even).
void safetensors_write(int fd, const std::string& path, const safetensors_tensor& tensor,
                       int64_t begin, int64_t end, const float* values);
