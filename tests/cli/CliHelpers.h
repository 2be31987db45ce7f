// CliHelpers: what the command-line tests of emit_tests share: a spec of
// specs/ by name, whether output holds a text, a file's bytes, and a fresh
// work directory (FSDPGEN_SOURCE_DIR and FSDPGEN_E2E_WORK_ROOT come from
// tests/CMakeLists.txt).
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/common/Command.h"

namespace fsdpgen::test {

inline std::string spec(const std::string& name) {
  return std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + name;
}

inline bool has(const CmdResult& r, const std::string& s) {
  return r.out.find(s) != std::string::npos;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh, empty directory for one test.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace fsdpgen::test
