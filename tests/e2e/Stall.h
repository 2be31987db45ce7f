// Stall: what the watchdog's tests share (tests/e2e/StallTest.cpp on the CPU,
// tests/cuda/StallTest.cpp on a GPU): the op a stalled rank is caught in,
// counting report lines, and a test's own copy of a binary and watch
// directory.
#pragma once

#include <filesystem>
#include <regex>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {

inline constexpr int kStalledExitCode = 3;  // runtime/train/watchdog.h

// The compute stream's first op in the binary's schedule: its id and label.
inline std::pair<int, std::string> first_compute_op(const std::filesystem::path& bin) {
  CmdResult s = run_command(bin.string() + " --print-schedule");
  std::smatch m;
  EXPECT_TRUE(std::regex_search(
      s.out, m, std::regex(R"(stream compute \(\d+ ops\):\n  #(\d+) +(\S+( \S+)*?) {2,})")))
      << s.out;
  return m.empty() ? std::pair{-1, std::string()} : std::pair{std::stoi(m[1]), m[2].str()};
}

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

// A copy of `bin` of this test's own, in e2e_dir(name): tests that find
// their ranks by executable, or signal them, never touch another test's
// (CTest runs them in parallel), and their outputs stay apart.
inline std::filesystem::path own_copy(const std::filesystem::path& bin, const std::string& name) {
  const std::filesystem::path dir = e2e_dir(name);
  std::filesystem::copy_file(bin, dir / "train", std::filesystem::copy_options::overwrite_existing);
  return dir / "train";
}

// The test's own --watch-dir (empty at start), so that what a run leaves
// there is its own.
inline std::filesystem::path watch_root(const std::filesystem::path& bin) {
  const std::filesystem::path dir = bin.parent_path() / "watch";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline bool holds_nothing(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::directory_iterator(dir, ec) == std::filesystem::directory_iterator();
}

}  // namespace fsdpgen::test
