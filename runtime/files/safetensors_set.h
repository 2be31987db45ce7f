// safetensors_set: the tensors of a Hugging Face checkpoint as one view,
// whether it is one .safetensors file, a directory (model.safetensors, or
// the shards model-0000k-of-0000n.safetensors that
// model.safetensors.index.json maps tensors to) or that index file itself.
// Only headers are read when it opens (each shard file once); tensor data is
// read later by byte range (safetensors_read), so each rank reads only its own.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/files/safetensors.h"

struct safetensors_set {
  std::string path;                     // what was opened
  std::string dir;                      // the directory of the files ("" for one file)
  std::vector<safetensors_file> files;  // each shard once, in the index's order
  // Tensor name -> (file index, tensor index within it).
  std::map<std::string, std::pair<size_t, size_t>, std::less<>> where;
  // The tensor and the file holding it; {nullptr, nullptr} when absent.
  std::pair<const safetensors_file*, const safetensors_tensor*> find(std::string_view name) const;
  size_t tensor_count() const { return where.size(); }
};

// Throws std::runtime_error naming the file and the problem: a path that is
// none of the three, an index that is not JSON or lacks a weight_map, one
// naming a file that cannot be opened (or is not safetensors), a tensor the
// index places in a file that lacks it, or metadata.total_size differing
// from the tensors' bytes.
safetensors_set safetensors_set_open(const std::string& path);
