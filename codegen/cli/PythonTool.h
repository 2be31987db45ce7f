// PythonTool: the `fsdpgen` commands whose work is a Python tool of the
// project's (tools/*.py), for what Python's well-kept libraries do best:
// `fsdpgen prepare` (tools/prepare.py, Hugging Face tokenizers) and the
// others PythonTool.cpp's table lists. This adds them to the command line,
// finds the python that has their libraries and runs the tool in place of
// the command.
#pragma once

#include <string>
#include <vector>
#include "codegen/cli/Command.h"

namespace fsdpgen {

// Adds prepare, prepare-eval, metrics and train-tokenizer to `app`, in that
// order: each passes every word after its name, --help included, to its tool.
std::vector<Command> add_python_tool_commands(CLI::App& app);

// The python that runs the tools: $FSDPGEN_PYTHON when set, else the venv
// `bash tools/setup.sh python` makes in the build directory.
std::string tool_python();

// Runs tools/<script> with `args` as given (its flags are its own: `fsdpgen
// <command> --help` prints them) in place of this process, so its exit status
// and signals are the command's. A python or script that is not there is an
// error naming `command` and the install command (exit 1).
int run_python_tool(const std::string& command, const std::string& script,
                    const std::vector<std::string>& args);

}  // namespace fsdpgen
