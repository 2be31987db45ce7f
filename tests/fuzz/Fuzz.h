// Fuzz: what the fuzz targets share: invariant checks that abort (so that
// libFuzzer reports the input), and scratch files for readers that take paths:
// one directory per process (in $FSDPGEN_FUZZ_SCRATCH, else /dev/shm where it
// can be; removed at a normal exit), each input rewriting its files there.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fuzz {

[[noreturn]] inline void harness_fail(const std::string& what) {
  std::fprintf(stderr, "fuzz harness: %s\n", what.c_str());
  std::abort();
}

// Stops the run when a reader broke a promise of its header.
[[noreturn]] inline void broken(const std::string& invariant) {
  std::fprintf(stderr, "invariant broken: %s\n", invariant.c_str());
  std::abort();
}
inline void check(bool ok, const char* invariant) {
  if (!ok) broken(invariant);
}

inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const char* chosen = std::getenv("FSDPGEN_FUZZ_SCRATCH");
    const fs::path base = chosen                            ? fs::path(chosen)
                          : ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm")
                                                            : fs::temp_directory_path();
    std::error_code ec;
    fs::create_directories(base, ec);
    std::string pattern = (base / "fsdpgen-fuzz-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) harness_fail("cannot make a directory in " + base.string());
    return pattern;
  }();
  static const bool cleaned_at_exit = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return true;
  }();
  (void)cleaned_at_exit;
  return dir;
}

// scratch_dir()/name holding size bytes of data; returns its path.
inline std::string write_file(const std::string& name, const void* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  f.close();
  if (!f) harness_fail("cannot write " + path);
  return path;
}

}  // namespace fuzz
