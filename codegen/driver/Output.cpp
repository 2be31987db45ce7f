// Output: whole text files, or stdout.
#include "codegen/driver/Output.h"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>

namespace fsdpgen {

bool write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fputs(text.c_str(), stdout);
    return true;
  }
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) {
    print_stderr(fmt::format("fsdpgen: error: cannot write '{}'\n", path));
    return false;
  }
  return true;
}

void print_stderr(const std::string& text) {
  std::fputs(text.c_str(), stderr);
}

}  // namespace fsdpgen
