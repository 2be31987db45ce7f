// CliHelpers: what the command-line tests of emit_tests share: a spec of
// specs/ by name, whether output holds a text, and a fresh work directory
// (FSDPGEN_SOURCE_DIR and FSDPGEN_E2E_WORK_ROOT come from
// tests/CMakeLists.txt); a file's bytes come from tests/common/Files.h.
#pragma once

#include <filesystem>
#include <string>

#include "tests/common/Command.h"
#include "tests/common/Files.h"

namespace fsdpgen::test {

inline std::string spec(const std::string& name) {
  return std::string(FSDPGEN_SOURCE_DIR) + "/specs/" + name;
}

inline bool has(const CmdResult& r, const std::string& s) {
  return r.out.find(s) != std::string::npos;
}

// A fresh, empty directory for one test.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(FSDPGEN_E2E_WORK_ROOT) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace fsdpgen::test
