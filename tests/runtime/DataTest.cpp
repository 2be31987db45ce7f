// Data sources: synthetic determinism, independence from how sequences are
// split among ranks, learnable structure; text and .bin windows; every
// malformed file gets an error naming the path and the problem.
#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/common/ExpectError.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "runtime/train/data.h"

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
  EXPECT_EQ(dataloader_describe(d), "text " + path + ": 23 bytes, 4 sequences of 5, in order");
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

// Bytes into a tokenizer's vocabulary (GPT-2's 50,257) are refused, naming
// token files and --allow-bytes, unless allowed; a byte-level model's text
// and an allowed larger vocabulary read the same bytes.
TEST(Data, TextIntoATokenizersVocabularyNeedsAllowBytes) {
  const std::string path = temp_path("notes.txt");
  write_bytes(path, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  data_config c{data_kind::text, 0, {path}, 50257, 4};
  expect_error([&] { dataloader_open(c); },
               {path, "vocabulary has 50,257 tokens", "it would train on raw bytes",
                "llm.c token files", "docs/data.md#token-files", "--allow-bytes"});
  c.allow_bytes = true;
  const dataloader allowed = dataloader_open(c);
  const dataloader bytes = dataloader_open({data_kind::text, 0, {path}, 256, 4});
  EXPECT_EQ(fill(allowed, 0, 2).tokens, fill(bytes, 0, 2).tokens);
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
  EXPECT_EQ(dataloader_describe(d),
            "tokens " + path + ": 1,000 tokens (uint16), 9 sequences of 100, in order");
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
               {path, "magic number is 20240521", "expected 20240520 (GPT-2 tokens) or 20240801"});
  expect_error(open(token_file(20240520, 2, 9, tokens)),
               {path, "version 2 is not supported", "accepted: version 1"});
  expect_error(open(token_file(20240520, 1, 10, tokens)),
               {path, "10 tokens", "18 bytes follow", "truncated?"});
  expect_error(open(token_file(20240520, 1, -1, tokens)), {path, "-1 tokens"});
  std::vector<unsigned char> odd = token_file(20240520, 1, 9, tokens);
  odd.push_back(0);
  expect_error(open(odd), {path, "9 tokens", "19 bytes follow", "more than the header counts"});
  expect_error(open(token_file(20240520, 1, 4, {1, 2, 3, 4})),
               {path, "4 tokens", "context + 1 = 5"});
  std::filesystem::remove(path);
}

// A token file set: n token ids (i * 7 mod 60) split at `cuts` into
// name_0.bin, name_1.bin, ... in GPT-2's (uint16) or Llama 3's (uint32) format.
std::vector<int32_t> stream_of(int n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = (i * 7) % 60;
  return t;
}
std::vector<unsigned char> token_file_of(const std::vector<int32_t>& t, bool wide) {
  std::vector<int32_t> header(256, 0);
  header[0] = wide ? 20240801 : 20240520;
  header[1] = wide ? 7 : 1;
  header[2] = static_cast<int32_t>(t.size());
  std::vector<unsigned char> bytes(1024 + (wide ? 4 : 2) * t.size());
  std::memcpy(bytes.data(), header.data(), 1024);
  for (size_t i = 0; i < t.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(t[i]);
    std::memcpy(bytes.data() + 1024 + (wide ? 4 : 2) * i, &v, wide ? 4 : 2);
  }
  return bytes;
}
std::string write_set(const std::string& name, const std::vector<int32_t>& t,
                      const std::vector<size_t>& cuts, bool wide = false) {
  size_t from = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t to = i < cuts.size() ? cuts[i] : t.size();
    write_bytes(temp_path(name + "_" + std::to_string(i) + ".bin"),
                token_file_of({t.begin() + static_cast<ptrdiff_t>(from),
                               t.begin() + static_cast<ptrdiff_t>(to)},
                              wide));
    from = to;
  }
  return temp_path(name + "_*.bin");
}
void remove_set(const std::string& name, size_t files) {
  for (size_t i = 0; i < files; ++i)
    std::filesystem::remove(temp_path(name + "_" + std::to_string(i) + ".bin"));
}
data_config tokens_of(std::vector<std::string> paths, int64_t T, bool shuffle = false) {
  data_config c{data_kind::tokens, 0, std::move(paths), 64, T};
  c.shuffle = shuffle;
  c.shuffle_seed = 1337;
  return c;
}

// The files of a set are one stream: split anywhere (windows span files),
// named by a glob or a list, uint16 or uint32, every window is the one file's.
TEST(Data, ASplitSetIsOneStream) {
  const std::vector<int32_t> t = stream_of(501);
  const std::string whole = write_set("whole", t, {});
  const dataloader one = dataloader_open(tokens_of({whole}, 10));
  ASSERT_EQ(one.windows, 50);
  const batch want = fill(one, 0, 50);
  for (size_t k = 0; k < want.tokens.size(); ++k)
    ASSERT_EQ(want.tokens[k], t[k / 10 * 10 + k % 10]) << k;
  const std::string glob = write_set("split", t, {3, 255, 256});
  const std::string wide = write_set("wide", t, {100}, true);
  const std::vector<std::string> list = {temp_path("split_0.bin"), temp_path("split_1.bin"),
                                         temp_path("split_2.bin"), temp_path("split_3.bin")};
  for (const data_config& c :
       {tokens_of({glob}, 10), tokens_of(list, 10),
        tokens_of({temp_path("split_0.bin"), temp_path("split_[1-3].bin")}, 10),
        tokens_of({wide}, 10)}) {
    const dataloader d = dataloader_open(c);
    EXPECT_EQ(d.windows, 50);
    const batch got = fill(d, 0, 50);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.targets, want.targets);
    EXPECT_EQ(dataloader_take_error(d), "");
  }
  EXPECT_EQ(dataloader_describe(dataloader_open(tokens_of({glob}, 10))),
            "tokens " + glob + ": 4 files, 501 tokens (uint16), 50 sequences of 10, in order");
  EXPECT_EQ(dataloader_describe(dataloader_open(tokens_of({wide}, 10, true))),
            "tokens " + wide + ": 2 files, 501 tokens (uint32), 50 sequences of 10, shuffled");
  remove_set("whole", 1);
  remove_set("split", 4);
  remove_set("wide", 2);
}

// Each shuffled epoch is a permutation of the windows, its own, a function
// of (seed, epoch, position) only; without a shuffle, file order.
TEST(Data, ShuffledEpochsArePermutationsOfTheWindows) {
  for (int64_t n : {1, 2, 3, 5, 1000, 1023, 1024, 1025, 65537}) {
    for (int64_t epoch : {0, 1}) {
      std::vector<char> seen(static_cast<size_t>(n), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t w = data_shuffle(42, epoch, i, n);
        ASSERT_GE(w, 0);
        ASSERT_LT(w, n);
        ASSERT_FALSE(seen[static_cast<size_t>(w)]) << "n " << n << " window " << w << " twice";
        seen[static_cast<size_t>(w)] = 1;
      }
    }
    if (n < 1000) continue;
    int64_t same_epochs = 0, same_seeds = 0, fixed = 0;
    for (int64_t i = 0; i < n; ++i) {
      same_epochs += data_shuffle(42, 0, i, n) == data_shuffle(42, 1, i, n);
      same_seeds += data_shuffle(42, 0, i, n) == data_shuffle(43, 0, i, n);
      fixed += data_shuffle(42, 0, i, n) == i;
    }
    // A random permutation agrees with another in about one place.
    EXPECT_LT(same_epochs, 10) << n;
    EXPECT_LT(same_seeds, 10) << n;
    EXPECT_LT(fixed, 10) << n;
  }
  std::vector<int32_t> t(20 * 8 + 1);  // window j starts with id j
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<int32_t>(i / 8);
  const std::string set = write_set("shuffled", t, {77});
  const dataloader d = dataloader_open(tokens_of({set}, 8, true));
  const batch two_epochs = fill(d, 0, 40);
  std::set<int32_t> firsts;
  for (int64_t j = 0; j < 20; ++j) {
    const int32_t first = two_epochs.tokens[static_cast<size_t>(j * 8)];
    const batch alone = fill(d, j, 1);  // a pure function of the sequence index
    EXPECT_EQ(alone.tokens[0], first);
    firsts.insert(first);
  }
  EXPECT_EQ(firsts.size(), 20u);  // every window once
  EXPECT_NE(std::vector<int32_t>(two_epochs.tokens.begin(), two_epochs.tokens.begin() + 160),
            std::vector<int32_t>(two_epochs.tokens.begin() + 160, two_epochs.tokens.end()));
  EXPECT_EQ(dataloader_epoch(d, 19), 0);
  EXPECT_EQ(dataloader_epoch(d, 20), 1);
  dataloader other = dataloader_open(tokens_of({set}, 8, true));
  dataloader_set_shuffle_seed(other, 7);
  EXPECT_NE(fill(other, 0, 20).tokens,
            std::vector<int32_t>(two_epochs.tokens.begin(), two_epochs.tokens.begin() + 160));
  remove_set("shuffled", 2);
}

// A token id >= vocab is found when its window is filled: written as 0, and
// the first one named with its file, byte offset and sequence until taken.
TEST(Data, ATokenBeyondTheVocabIsReportedWhenFilled) {
  std::vector<int32_t> t = stream_of(101);
  t[47] = 64;
  t[60] = 70;
  const std::string set = write_set("beyond", t, {40});
  const dataloader d = dataloader_open(tokens_of({set}, 10));  // opens: ids are not scanned
  EXPECT_EQ(fill(d, 0, 4).tokens[5], t[5]);
  EXPECT_EQ(dataloader_take_error(d), "");
  const batch b = fill(d, 4, 3);  // windows 4..6: tokens 40..70
  EXPECT_EQ(b.tokens[7], 0);
  EXPECT_EQ(dataloader_take_error(d),
            temp_path("beyond_1.bin") +
                ": token at byte offset 1038 is 64, not < vocab 64 (in data sequence 4)");
  EXPECT_EQ(dataloader_take_error(d), "");
  remove_set("beyond", 2);
}

// Sets that cannot serve are refused at open, naming the file or pattern.
TEST(Data, BadSetsAreRefusedNamingTheFile) {
  const std::vector<int32_t> t = stream_of(101);
  expect_error([&] { dataloader_open(tokens_of({temp_path("none_*.bin")}, 10)); },
               {temp_path("none_*.bin"), "no file matches this pattern"});
  const std::string set = write_set("mixed", t, {50});
  write_bytes(temp_path("mixed_1.bin"), token_file_of({t.begin() + 50, t.end()}, true));
  expect_error([&] { dataloader_open(tokens_of({set}, 10)); },
               {temp_path("mixed_1.bin"), "holds uint32 tokens but", temp_path("mixed_0.bin"),
                "holds uint16", "one format"});
  expect_error(
      [&] {
        dataloader_open(tokens_of({set, temp_path("mixed_0.bin")}, 10));
      },
      {temp_path("mixed_0.bin"), "named twice"});
  expect_error([&] { dataloader_open(tokens_of({std::filesystem::temp_directory_path()}, 10)); },
               {"not a regular file"});
  remove_set("mixed", 2);
}

// Opening many files maps them and reads only their headers.
TEST(Data, OpeningAHundredFilesIsQuick) {
  const std::vector<int32_t> t = stream_of(100 * 1000 + 1);
  std::vector<size_t> cuts;
  for (size_t k = 1; k < 100; ++k)
    cuts.push_back(k * 1000);
  const std::string set = write_set("hundred", t, cuts);
  const auto start = std::chrono::steady_clock::now();
  const dataloader d = dataloader_open(tokens_of({set}, 1024));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("opened 100 token files in %.4f s\n", seconds);
  EXPECT_EQ(d.files.size(), 100u);
  EXPECT_EQ(d.windows, 97);
  EXPECT_LT(seconds, 5.0);  // a sanity bound, not a timing: it takes milliseconds
  remove_set("hundred", 100);
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
