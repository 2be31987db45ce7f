// Prepare: `fsdpgen prepare` runs tools/prepare.py with the build's python.
#include "codegen/cli/Prepare.h"

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

std::string prepare_python() {
  const std::string given = python_from_env();
  return given.empty() ? FSDPGEN_PREPARE_PYTHON : given;
}

int run_prepare(const std::vector<std::string>& args) {
  const std::string python = prepare_python(), script = FSDPGEN_PREPARE_SCRIPT;
  const bool from_env = !python_from_env().empty();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(python, ec) || ::access(python.c_str(), X_OK) != 0) {
    std::fputs(
        fmt::format(
            "fsdpgen prepare: error: {}: no python there ({}); the tokenizer library is "
            "installed with: bash tools/setup.sh python\n",
            python,
            from_env ? "$FSDPGEN_PYTHON" : "the venv tools/setup.sh makes in the build directory")
            .c_str(),
        stderr);
    return kExitSpecError;
  }
  if (!std::filesystem::is_regular_file(script, ec)) {
    std::fputs(fmt::format("fsdpgen prepare: error: {}: the tool is not there (this fsdpgen was "
                           "built from a source tree that has moved)\n",
                           script)
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
  std::fputs(
      fmt::format("fsdpgen prepare: error: cannot run {}: {}\n", python, strerror(errno)).c_str(),
      stderr);
  return kExitSpecError;
}

}  // namespace fsdpgen
