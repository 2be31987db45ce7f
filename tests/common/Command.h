// Runs a command line for CLI tests: exit status and stdout+stderr together.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace fsdpgen::test {

struct CmdResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
};

inline CmdResult run_command(const std::string& cmd) {
  CmdResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

// fsdpgen with these arguments.
inline CmdResult run(const std::string& args) {
  return run_command(std::string(FSDPGEN_BIN) + " " + args);
}

}  // namespace fsdpgen::test
