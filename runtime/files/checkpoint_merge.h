// checkpoint_merge: `fsdpgen merge`: one model.safetensors with Hugging Face
// names from a checkpoint's shard files, whatever world wrote them (the same
// file `--save` writes at that step), or the model directory `--save DIR`
// writes (runtime/files/hf_directory.h). Optimizer state is not merged; a run that
// needs it resumes from the checkpoint itself, at any world size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/files/hf_directory.h"

struct checkpoint_merged {
  std::string checkpoint;  // the step_N directory read
  int64_t step = 0;
  int64_t tensors = 0, params = 0, bytes = 0;
  int64_t files = 1;  // safetensors files written
  std::string spec;   // the spec the checkpoint's run was built from (its manifest's)
};

// A shard size as transformers writes one: bytes, or a number with kB, MB,
// GB (powers of 1000) or KiB, MiB, GiB (powers of 1024), e.g. "5GB";
// nullopt when it is not one or not positive.
std::optional<int64_t> shard_size_bytes(const std::string& text);

// checkpoint: a step_N directory or a directory of them (its newest). dtype
// "F32", "BF16" or "F16". Without `directory`, out is one safetensors file,
// written as out.partial and renamed when complete. With it, out is a model
// directory (runtime/files/hf_directory.h: new, empty, or a model directory
// it replaces): the tensors in order in files of at most max_shard_bytes
// of data each (0: kHfMaxShardBytes), their index when there are several,
// and `directory`'s files, written as out.partial and renamed when
// complete. Nothing is left at out (nor out.partial) when it fails. Throws
// std::runtime_error naming the file and the problem.
checkpoint_merged checkpoint_merge(const std::string& checkpoint, const std::string& out,
                                   const std::string& dtype,
                                   const hf_directory_files* directory = nullptr,
                                   int64_t max_shard_bytes = 0);

// A checkpoint's tensors, each whole in memory (fp32, Hugging Face names and
// global shapes, in the manifest's order), as merge writes them: what
// `fsdpgen sample` generates from.
struct checkpoint_tensor_values {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
struct checkpoint_weights {
  std::string checkpoint;  // the step_N directory read
  int64_t step = 0;
  std::vector<checkpoint_tensor_values> tensors;
};
// checkpoint: a step_N directory or a directory of them (its newest).
// Throws std::runtime_error naming the file and the problem.
checkpoint_weights checkpoint_weights_read(const std::string& checkpoint);
