// checkpoint_merge: `fsdpgen merge`: one model.safetensors with Hugging Face
// names from a checkpoint's shard files, whatever world wrote them (the same
// file `--save` writes at that step), or with a maximum shard size a model
// directory as transformers' save_pretrained writes one (shard files with
// model.safetensors.index.json). Optimizer state is not merged; a run that
// needs it resumes from the checkpoint itself, at any world size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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
// "F32", "BF16" or "F16". Writes out.partial and renames it to out when
// complete. With max_shard_bytes > 0, out is a new (or empty) directory: the
// tensors in order in files of at most that many bytes of data each (a
// larger tensor alone in one), model-0000k-of-0000n.safetensors and
// model.safetensors.index.json, or model.safetensors when one file holds all,
// and `config_json` as config.json when it is not empty. Nothing is left at
// out (nor out.partial) when it fails. Throws std::runtime_error naming the
// file and the problem.
checkpoint_merged checkpoint_merge(const std::string& checkpoint, const std::string& out,
                                   const std::string& dtype, int64_t max_shard_bytes = 0,
                                   const std::string& config_json = "");
