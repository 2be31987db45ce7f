// A file's bytes, for tests that compare what a command wrote.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace fsdpgen::test {

// The whole file; "" when it cannot be read (the comparison that follows
// then fails, naming the file).
inline std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace fsdpgen::test
