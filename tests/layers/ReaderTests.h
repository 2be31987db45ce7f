// ReaderTests: what the layers_tests that run the layer reader share: the
// skip (with its reason) where fsdpgen-layers is not built
// (FSDPGEN_LAYER_READER comes from tests/CMakeLists.txt), and a file's bytes
// (tests/common/Files.h).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/common/Files.h"

#define SKIP_WITHOUT_READER()                                                                \
  if (std::string(FSDPGEN_LAYER_READER).empty())                                             \
  GTEST_SKIP() << "fsdpgen-layers is not built: CMake found no Clang 19.1 package (Debian: " \
                  "clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev; tools/setup.sh " \
                  "installs them)"
