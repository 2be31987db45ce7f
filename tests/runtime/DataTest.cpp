// Data sources: synthetic determinism, independence from how sequences are
// split among ranks, learnable structure; text and .bin windows; every
// malformed file gets an error naming the path and the problem.
#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/common/ExpectError.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/data.h"

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("fsdpgen_data_" + std::to_string(getpid()) + "_" + name))
      .string();
}

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// An llm.c token file with the given header fields and tokens.
std::vector<unsigned char> token_file(int32_t magic, int32_t version, int32_t count,
                                      const std::vector<uint16_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::vector<unsigned char> bytes(1024 + 2 * tokens.size());
  std::memcpy(bytes.data(), header.data(), 1024);
  std::memcpy(bytes.data() + 1024, tokens.data(), 2 * tokens.size());
  return bytes;
}

struct batch {
  std::vector<int32_t> tokens, targets;
};

batch fill(const dataloader& d, int64_t first, int64_t count) {
  const int64_t T = d.config.context;
  batch b{std::vector<int32_t>(count * T), std::vector<int32_t>(count * T)};
  dataloader_fill(d, first, count, b.tokens.data(), b.targets.data());
  return b;
}

data_config synthetic(uint64_t seed, int64_t vocab, int64_t context) {
  return {data_kind::synthetic, seed, {}, vocab, context};
}

TEST(Data, SyntheticIsAFunctionOfSeedAndSequence) {
  dataloader d = dataloader_open(synthetic(7, 256, 64));
  batch all = fill(d, 0, 12);
  EXPECT_EQ(all.tokens, fill(dataloader_open(synthetic(7, 256, 64)), 0, 12).tokens);
  // Rank r of 3 filling its 4 sequences gets the same rows as one process.
  for (int64_t r = 0; r < 3; r++) {
    batch part = fill(d, 4 * r, 4);
    EXPECT_TRUE(
        std::equal(part.tokens.begin(), part.tokens.end(), all.tokens.begin() + 4 * r * 64));
    EXPECT_TRUE(
        std::equal(part.targets.begin(), part.targets.end(), all.targets.begin() + 4 * r * 64));
  }
  EXPECT_NE(all.tokens, fill(dataloader_open(synthetic(8, 256, 64)), 0, 12).tokens);
  EXPECT_NE(std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + 64),
            std::vector<int32_t>(all.tokens.begin() + 64, all.tokens.begin() + 128));
  EXPECT_EQ(dataloader_describe(d), "synthetic(seed=7)");
}

TEST(Data, TargetsAreTokensShiftedByOne) {
  dataloader d = dataloader_open(synthetic(1, 256, 32));
  batch b = fill(d, 100, 3);
  for (int64_t s = 0; s < 3; s++)
    for (int64_t t = 0; t + 1 < 32; t++)
      EXPECT_EQ(b.targets[s * 32 + t], b.tokens[s * 32 + t + 1]);
  batch one = fill(dataloader_open(synthetic(1, 256, 1)), 0, 4);  // T = 1 works too
  EXPECT_EQ(one.tokens.size(), 4u);
}

TEST(Data, SyntheticUsesAnAlphabetOfTheVocab) {
  for (int64_t V : {256, 50257}) {
    batch b = fill(dataloader_open(synthetic(3, V, 128)), 0, 64);
    std::set<int32_t> seen(b.tokens.begin(), b.tokens.end());
    seen.insert(b.targets.begin(), b.targets.end());
    EXPECT_GE(*seen.begin(), 0);
    EXPECT_LT(*seen.rbegin(), V);
    EXPECT_LE(seen.size(), 256u);
    EXPECT_GT(seen.size(), 200u);
  }
}

// A bigram model counted on some sequences predicts others far better than
// ln(V) = 5.5: the structure a small GPT learns in its first hundred steps.
// (Its floor is about 1.2 nats; counting from 512K tokens gets close.)
TEST(Data, SyntheticHasLearnableStructure) {
  const int64_t T = 128, V = 256;
  dataloader d = dataloader_open(synthetic(11, V, T));
  batch train = fill(d, 0, 4000), test = fill(d, 100'000, 500);
  std::vector<double> pair_counts(V * V), counts(V);
  for (size_t i = 0; i < train.tokens.size(); i++) {
    pair_counts[train.tokens[i] * V + train.targets[i]] += 1;
    counts[train.tokens[i]] += 1;
  }
  double loss = 0;
  const double smoothing = 0.5;
  for (size_t i = 0; i < test.tokens.size(); i++)
    loss -= std::log((pair_counts[test.tokens[i] * V + test.targets[i]] + smoothing) /
                     (counts[test.tokens[i]] + V * smoothing));
  loss /= static_cast<double>(test.tokens.size());
  EXPECT_LT(loss, 1.35);
  EXPECT_GT(loss, 1.1);
}

TEST(Data, TextWindowsAreConsecutiveAndWrap) {
  const std::string path = temp_path("input.txt");
  std::vector<unsigned char> text;
  for (int i = 0; i < 23; i++)
    text.push_back(static_cast<unsigned char>('a' + i));
  write_bytes(path, text);
  dataloader d = dataloader_open({data_kind::text, 0, {path}, 256, 5});
  EXPECT_EQ(d.windows, 4);  // (23 - 1) / 5
  batch b = fill(d, 3, 2);  // windows 3 and 0
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin(), b.tokens.begin() + 5),
            (std::vector<int32_t>{'p', 'q', 'r', 's', 't'}));
  EXPECT_EQ(std::vector<int32_t>(b.targets.begin(), b.targets.begin() + 5),
            (std::vector<int32_t>{'q', 'r', 's', 't', 'u'}));
  EXPECT_EQ(std::vector<int32_t>(b.tokens.begin() + 5, b.tokens.end()),
            (std::vector<int32_t>{'a', 'b', 'c', 'd', 'e'}));
  EXPECT_EQ(dataloader_describe(d), "text " + path + ": 23 bytes, 4 sequences of 5");
  std::filesystem::remove(path);
}

TEST(Data, TextErrors) {
  const std::string path = temp_path("short.txt");
  write_bytes(path, {'a', 'b', 'c'});
  expect_error(
      [&] {
        dataloader_open({data_kind::text, 0, {path}, 100, 2});
      },
      {path, "vocab >= 256", "vocab is 100"});
  expect_error(
      [&] {
        dataloader_open({data_kind::text, 0, {path}, 256, 3});
      },
      {path, "3 bytes", "context + 1 = 4"});
  expect_error(
      [&] {
        dataloader_open({data_kind::text, 0, {path + ".missing"}, 256, 2});
      },
      {path + ".missing", "cannot open", "No such file"});
  expect_error([&] { dataloader_open({data_kind::text, 0, {path}, 256, 0}); }, {path, "context"});
  std::filesystem::remove(path);
}

TEST(Data, TokenFileWindows) {
  const std::string path = temp_path("train.bin");
  std::vector<uint16_t> tokens;
  for (uint16_t i = 0; i < 1000; i++)
    tokens.push_back(static_cast<uint16_t>(i * 50));
  write_bytes(path, token_file(20240520, 1, 1000, tokens));
  dataloader d = dataloader_open({data_kind::tokens, 0, {path}, 50257, 100});
  EXPECT_EQ(d.windows, 9);
  batch b = fill(d, 9 + 2, 1);  // window 2
  EXPECT_EQ(b.tokens[0], 200 * 50);
  EXPECT_EQ(b.targets[99], 300 * 50);
  EXPECT_EQ(dataloader_describe(d), "tokens " + path + ": 1,000 tokens, 9 sequences of 100");
  std::filesystem::remove(path);
}

TEST(Data, TokenFileErrors) {
  const std::string path = temp_path("bad.bin");
  const std::vector<uint16_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto open = [&](const std::vector<unsigned char>& bytes, int64_t vocab = 50257) {
    write_bytes(path, bytes);
    return [&path, vocab] { dataloader_open({data_kind::tokens, 0, {path}, vocab, 4}); };
  };
  expect_error(open({}), {path, "0 bytes", "1024-byte header"});
  expect_error(open(token_file(20240521, 1, 9, tokens)),
               {path, "magic number is 20240521", "expected 20240520"});
  expect_error(open(token_file(20240520, 2, 9, tokens)),
               {path, "version 2 is not supported", "accepted: version 1"});
  expect_error(open(token_file(20240520, 1, 10, tokens)), {path, "10 tokens", "18 bytes follow"});
  expect_error(open(token_file(20240520, 1, -1, tokens)), {path, "-1 tokens"});
  std::vector<unsigned char> odd = token_file(20240520, 1, 9, tokens);
  odd.push_back(0);
  expect_error(open(odd), {path, "9 tokens", "19 bytes follow"});
  expect_error(open(token_file(20240520, 1, 9, tokens), 7),
               {path, "token 6 (byte offset 1036) is 7", "not < vocab 7"});
  expect_error(open(token_file(20240520, 1, 4, {1, 2, 3, 4})),
               {path, "4 tokens", "context + 1 = 5"});
  std::filesystem::remove(path);
}

TEST(Data, FillRejectsNegativeRanges) {
  dataloader d = dataloader_open(synthetic(1, 256, 4));
  int32_t tokens[4], targets[4];
  expect_error([&] { dataloader_fill(d, -1, 1, tokens, targets); }, {"first -1"});
}

}  // namespace

// A text file named .bin is read as a token file: the error says so and how
// to pass text instead, whether it is shorter than the header or not.
TEST(Data, TextNamedBinSaysHowToPassText) {
  const std::string path = temp_path("input.bin");
  const std::string line = "First Citizen: before we proceed any further, hear me speak.\n";
  for (int lines : {1, 40}) {  // 62 and 2,480 bytes: short of the header, then past it
    std::ofstream(path) << [&] {
      std::string text;
      for (int i = 0; i < lines; ++i)
        text += line;
      return text;
    }();
    expect_error(
        [&] {
          dataloader_open({data_kind::tokens, 0, {path}, 50257, 4});
        },
        {path, "a .bin file is read as an llm.c token file",
         "another extension (e.g. --data input.txt)"});
  }
  std::filesystem::remove(path);
}
