// Command: what each subcommand's file gives Main.cpp: the subcommand, added
// to fsdpgen's CLI::App with its flags bound to its own options, and what
// runs it once the command line has parsed to it.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace fsdpgen {

struct Command {
  CLI::App* app = nullptr;   // the subcommand, owned by the app it was added to
  std::function<int()> run;  // its work with the flags' values; the exit status
};

}  // namespace fsdpgen
