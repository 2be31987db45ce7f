// ReaderTests: what the layers_tests that run the layer reader share: the
// skip (with its reason) where fsdpgen-layers is not built, and a file's
// bytes (FSDPGEN_LAYER_READER comes from tests/CMakeLists.txt).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#define SKIP_WITHOUT_READER()                                                                \
  if (std::string(FSDPGEN_LAYER_READER).empty())                                             \
  GTEST_SKIP() << "fsdpgen-layers is not built: CMake found no Clang 19.1 package (Debian: " \
                  "clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev; tools/setup.sh " \
                  "installs them)"

namespace fsdpgen::test {

inline std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace fsdpgen::test
