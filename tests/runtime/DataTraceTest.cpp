// Data traces (--trace-data, runtime/train/data.h data_trace): one line per
// sequence a fill reads, naming where it came from with a hash of the tokens
// it wrote; a line that cannot be written is the fill's error, never lost.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/fnv1a.h"
#include "runtime/train/data.h"

namespace {

namespace fs = std::filesystem;

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("fsdpgen_trace_{}_{}", getpid(), name);
}

// FNV-1a 64 over ids as int32 little-endian bytes, as the trace hashes them.
std::string fnv1a64(const std::vector<int32_t>& ids) {
  return fmt::format("{:016x}", fnv1a_ids(ids.data(), std::ssize(ids)));
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

// A GPT-2 token file of tokens 0, 1, 2, ... (n of them, below 64).
fs::path counting_token_file(const std::string& name, int32_t n) {
  const fs::path p = temp_path(name);
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = n;
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(header.data()), 1024);
  for (int32_t i = 0; i < n; ++i) {
    const uint16_t v = static_cast<uint16_t>(i % 64);
    f.write(reinterpret_cast<const char*>(&v), 2);
  }
  return p;
}

// Each line names the pass, step, rank, micro-batch, the sequence, the hash
// of exactly the T + 1 tokens at OFFSET of the file, and the file; a
// synthetic stream's names its seed and hashes the rows written.
// runtime/fnv1a.h against FNV-1a 64's published vectors; token ids hash as
// their int32 little-endian bytes.
TEST(DataTrace, Fnv1aIsTheStandardOne) {
  EXPECT_EQ(fnv1a(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fnv1a("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fnv1a("foobar"), 0x85944171f73967e8ull);
  const int32_t ids[] = {0x61626f66, 0x7261};  // "foba", "ar\0\0"
  EXPECT_EQ(fnv1a_ids(ids, 2), fnv1a(std::string_view("fobaar\0\0", 8)));
  EXPECT_EQ(fnv1a_ids(ids + 1, 1, fnv1a_ids(ids, 1)), fnv1a_ids(ids, 2));
}

TEST(DataTrace, EachLineSaysWhereItsSequenceWasReadAndHashesItsTokens) {
  constexpr int64_t T = 4;
  const fs::path file = counting_token_file("windows.bin", 5 * T + 1);
  const fs::path trace = temp_path("windows.trace");
  fs::remove(trace);
  const int fd = ::open(trace.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  const data_config tokens{data_kind::tokens, 0, {file.string()}, 64, T};
  const dataloader d = dataloader_open(tokens);
  std::vector<int32_t> in(2 * T), out(2 * T);
  const data_trace train{fd, "train", 3, 1, 2};
  dataloader_fill(d, 6, 2, in.data(), out.data(), &train);  // windows 1 and 2 of epoch 1
  const dataloader synthetic = dataloader_open({data_kind::synthetic, 7, {}, 64, T});
  const data_trace val{fd, "val", 0, 1, 0};
  dataloader_fill(synthetic, 9, 1, in.data(), out.data(), &val);
  std::vector<int32_t> row(in.begin(), in.begin() + T);
  row.push_back(out[T - 1]);
  ::close(fd);
  const std::vector<std::string> lines = lines_of(trace);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0],
            fmt::format("train 3 1 2 6 {} 4 {}", fnv1a64({4, 5, 6, 7, 8}), file.string()));
  EXPECT_EQ(lines[1],
            fmt::format("train 3 1 2 7 {} 8 {}", fnv1a64({8, 9, 10, 11, 12}), file.string()));
  EXPECT_EQ(lines[2], fmt::format("val 0 1 0 9 {} 9 synthetic(seed=7)", fnv1a64(row)));
  EXPECT_EQ(dataloader_take_error(d), "");
  fs::remove(file);
  fs::remove(trace);
}

// A trace that cannot be written (here a descriptor open for reading only)
// is the fill's first error, for the loop to stop every rank with.
TEST(DataTrace, ALineThatCannotBeWrittenIsTheFillsError) {
  const fs::path file = counting_token_file("unwritable.bin", 9);
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const dataloader d = dataloader_open({data_kind::tokens, 0, {file.string()}, 64, 4});
  std::vector<int32_t> in(4), out(4);
  const data_trace trace{fd, "train", 0, 0, 0};
  dataloader_fill(d, 0, 1, in.data(), out.data(), &trace);
  ::close(fd);
  EXPECT_EQ(dataloader_take_error(d), "--trace-data: cannot append a line to the file");
  fs::remove(file);
}

}  // namespace
