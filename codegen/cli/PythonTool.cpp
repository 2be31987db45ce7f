// PythonTool: the commands that run a tool of tools/ with the build's python,
// one table of their names, scripts and descriptions.
#include "codegen/cli/PythonTool.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "codegen/cli/Common.h"

namespace fsdpgen {

namespace {

// $FSDPGEN_PYTHON, or "" when it is not set.
std::string python_from_env() {
  const char* given = std::getenv("FSDPGEN_PYTHON");
  return given ? given : "";
}

}  // namespace

std::string tool_python() {
  const std::string given = python_from_env();
  return given.empty() ? FSDPGEN_TOOLS_PYTHON : given;
}

int run_python_tool(const std::string& command, const std::string& script_name,
                    const std::vector<std::string>& args) {
  const std::string python = tool_python(),
                    script = std::string(FSDPGEN_TOOLS_DIR) + "/" + script_name;
  const bool from_env = !python_from_env().empty();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(python, ec) || ::access(python.c_str(), X_OK) != 0) {
    std::fputs(fmt::format("fsdpgen {}: error: {}: no python there ({}); the tools' libraries are "
                           "installed with: bash tools/setup.sh python\n",
                           command, python,
                           from_env ? "$FSDPGEN_PYTHON"
                                    : "the venv tools/setup.sh makes in the build directory")
                   .c_str(),
               stderr);
    return kExitSpecError;
  }
  if (!std::filesystem::is_regular_file(script, ec)) {
    std::fputs(fmt::format("fsdpgen {}: error: {}: the tool is not there (this fsdpgen was "
                           "built from a source tree that has moved)\n",
                           command, script)
                   .c_str(),
               stderr);
    return kExitSpecError;
  }
  std::vector<std::string> words = {python, script};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words)
    argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execv(python.c_str(), argv.data());
  std::fputs(fmt::format("fsdpgen {}: error: cannot run {}: {}\n", command, python, strerror(errno))
                 .c_str(),
             stderr);
  return kExitSpecError;
}

namespace {

struct PythonToolCommand {
  const char* name;
  const char* script;  // in tools/
  const char* description;
};

constexpr PythonToolCommand kPythonToolCommands[] = {
    {"prepare", "prepare.py",
     "text, JSON lines, Parquet or a saved Hugging Face dataset into llm.c token files through "
     "the model's tokenizer, sharded, with a validation split and manifest.json (fsdpgen "
     "prepare --help: tools/prepare.py's flags)"},
    {"prepare-eval", "prepare_eval.py",
     "HellaSwag's JSON lines (ctx, endings, label) into llm.c's multiple-choice evaluation file "
     "through the model's tokenizer, for the binary's --eval (fsdpgen prepare-eval --help: "
     "tools/prepare_eval.py's flags)"},
    {"metrics", "metrics_export.py",
     "a run's --metrics file as TensorBoard event files or a W&B offline run, once or live "
     "beside the run (fsdpgen metrics --help: tools/metrics_export.py's flags)"},
    {"train-tokenizer", "train_tokenizer.py",
     "a byte-level BPE tokenizer (GPT-2's or Llama 3's special tokens) trained on your text with "
     "Hugging Face tokenizers, for prepare and a spec's vocab (fsdpgen train-tokenizer --help: "
     "tools/train_tokenizer.py's flags)"},
};

}  // namespace

std::vector<Command> add_python_tool_commands(CLI::App& app) {
  std::vector<Command> commands;
  for (const PythonToolCommand& t : kPythonToolCommands) {
    CLI::App* sub = app.add_subcommand(t.name, t.description);
    sub->prefix_command();  // every word after the name is the tool's, --help included
    sub->set_help_flag();
    commands.push_back(
        {sub, [t, sub] { return run_python_tool(t.name, t.script, sub->remaining()); }});
  }
  return commands;
}

}  // namespace fsdpgen
