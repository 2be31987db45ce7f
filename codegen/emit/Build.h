// Build: compiles a generated program with the host C++ compiler and links
// it against the runtime library built with fsdpgen (no CMake run per
// binary). The flags are recorded when fsdpgen itself is configured.
#pragma once

#include <string>
#include <vector>

namespace fsdpgen {

struct BuildResult {
  bool ok = false;
  double seconds = 0;
  std::string command;  // as a shell would show it
};

// Why `output` cannot be written as the executable ("'dir' does not exist",
// "it is a directory", ...); empty when its directory exists and a file can be
// created in it (tried, then removed).
std::string unwritable_output_reason(const std::string& output);

// Compiles source_path (a generated train.cpp) into the executable `output`,
// linked with the CUDA runtime (runtime/cuda/, NCCL, cuBLASLt) when cuda;
// the compiler's diagnostics go to stderr. `include_dirs` come first on the
// include path (custom layer headers' directories). With cuda, each of
// `cuda_sources` (custom layers' CUDA entry points) is first compiled by
// nvcc into an object beside source_path and linked in. `extra_flags` follow
// the recorded compile flags (e.g. -g).
BuildResult build_program(const std::string& source_path, const std::string& output, bool cuda,
                          const std::vector<std::string>& include_dirs = {},
                          const std::vector<std::string>& cuda_sources = {},
                          const std::vector<std::string>& extra_flags = {});

}  // namespace fsdpgen
