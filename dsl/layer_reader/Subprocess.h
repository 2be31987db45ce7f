// Subprocess: a program run to completion with its output in a file and a
// time limit, and how it ended. The layer reader (ReadLayers) and
// `fsdpgen check-layer`'s program run this way.
#pragma once

#include <string>
#include <vector>

namespace fsdpgen::layers {

struct ProcessEnd {
  enum { exited, killed, not_started, timed_out } how = not_started;
  int code = 0;  // the exit status (exited) or the signal (killed)
  bool ok() const { return how == exited && code == 0; }
};

// Runs argv (argv[0] found on PATH when it has no '/') with stdout and
// stderr into `out_file`; killed past `seconds`.
ProcessEnd run_to_file(std::vector<std::string> args, const std::string& out_file, int seconds);

}  // namespace fsdpgen::layers
