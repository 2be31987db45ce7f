// Prepare: `fsdpgen prepare`, text corpora into llm.c token files through the
// model's own tokenizer. The work is tools/prepare.py's (Hugging Face
// tokenizers, docs/prepare.md); this finds the python that has it and runs it.
#pragma once

#include <string>
#include <vector>

namespace fsdpgen {

// The python that runs tools/prepare.py: $FSDPGEN_PYTHON when set, else the
// venv `bash tools/setup.sh python` makes in the build directory.
std::string prepare_python();

// Runs tools/prepare.py with `args` as given (its flags are its own: `fsdpgen
// prepare --help` prints them) in place of this process, so its exit status
// and signals are the command's. A python or script that is not there is an
// error naming the install command (exit 1).
int run_prepare(const std::vector<std::string>& args);

}  // namespace fsdpgen
