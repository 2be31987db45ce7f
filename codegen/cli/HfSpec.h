// HfSpec: a spec's model and a Hugging Face config.json, each from or against
// the other: `fsdpgen import-hf` writes the spec a config.json describes, and
// `fsdpgen check SPEC --hf DIR` names, at the spec's keys, where they differ.
#pragma once

#include <string>

#include "codegen/cli/Command.h"
#include "dsl/Spec.h"
#include "runtime/files/hf_model_of.h"  // hf_model_of(spec.model), for check --hf and merge

namespace fsdpgen {

// Adds `import-hf` and its flags to `app`.
Command add_import_hf_command(CLI::App& app);

// `fsdpgen import-hf SOURCE [-o OUTPUT]`: SOURCE is a model directory (its
// config.json) or a config.json; OUTPUT empty or "-" is stdout. The spec
// written checks and matches the config. Returns the exit status: 0; 1 when
// the config cannot be read, has keys no spec represents (each named, all at
// once) or OUTPUT cannot be written or is the config itself; 3 when the spec
// written does not match the config (a bug).
int run_import_hf(const std::string& source, const std::string& output);

// `fsdpgen check SPEC --hf SOURCE` for the checked `spec` read from
// spec_path: one line when its model matches the config, else every
// difference as an error at the spec's key (at the model's name where the
// spec leaves the key to its default) and exit status 1.
int run_check_hf(const std::string& spec_path, const Spec& spec, const std::string& source);

}  // namespace fsdpgen
