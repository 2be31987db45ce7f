// checkpoint_merge: `fsdpgen merge`: one model.safetensors with Hugging Face
// GPT-2 names from a checkpoint's shard files, whatever world wrote them (the
// same file `--save` writes at that step). Optimizer state is not merged; a
// run that needs it resumes from the checkpoint itself, at any world size.
#pragma once

#include <cstdint>
#include <string>

struct checkpoint_merged {
  std::string checkpoint;  // the step_N directory read
  int64_t step = 0;
  int64_t tensors = 0, params = 0, bytes = 0;
};

// checkpoint: a step_N directory or a directory of them (its newest). dtype
// "F32", "BF16" or "F16". Writes out.partial and renames it to out when complete.
// Throws std::runtime_error naming the file and the problem.
checkpoint_merged checkpoint_merge(const std::string& checkpoint, const std::string& out,
                                   const std::string& dtype);
