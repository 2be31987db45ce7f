// Sample: `fsdpgen sample MODEL`, text generated on the CPU
// (runtime/generate/generator.h) from a checkpoint (a step_N directory or a
// directory of them, read whole; its spec found as merge finds it, or
// --spec), a .safetensors file with --spec, or a Hugging Face model
// directory (config.json), decoded by a tokenizer.json
// (runtime/generate/token_decoder.h). docs/sample.md.
#pragma once

#include <cstdint>
#include <string>
#include "codegen/cli/Command.h"

namespace fsdpgen {

// Adds `sample` and its flags to `app`.
Command add_sample_command(CLI::App& app);

struct SampleOptions {
  std::string model, spec, tokenizer;
  std::string prompt, prompt_ids;  // text (encoded by tools/encode_prompt.py) or "1,2,3"
  int64_t tokens = 64;
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 1337;
  int64_t samples = 1;
};

// Prints each sample (the prompt and what follows it, decoded). Every bad
// input is an error naming it, exit kExitSpecError.
int run_sample(const SampleOptions& o);

}  // namespace fsdpgen
