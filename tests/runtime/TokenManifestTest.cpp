// token_manifest_check (runtime/files/token_manifest.h): a token set's
// manifest.json, as fsdpgen prepare writes it, against the model's vocab.
// tests/tools/prepare_train_test.py checks the same through a trained binary.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/files/token_manifest.h"
#include "tests/common/ExpectError.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

class TokenManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("fsdpgen_manifest_" + std::to_string(getpid()));
    fs::create_directories(dir);
    manifest = {{"format", "fsdpgen-tokens/1"},
                {"tokenizer",
                 {{"name", "gpt2"},
                  {"sha256", "0123456789abcdef"},
                  {"vocab_size", 50257},
                  {"special_tokens", {{"<|endoftext|>", 50256}}}}},
                {"dtype", "uint16"},
                {"splits",
                 {{"train", {{"shards", {{{"file", "train_000000.bin"}, {"tokens", 100}}}}}},
                  {"val", {{"shards", json::array()}}}}}};
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const json& j) { std::ofstream(dir / "manifest.json") << j.dump(); }
  void check(int64_t vocab, int64_t tokens = 100, const std::string& file = "train_000000.bin",
             int token_bytes = 2) {
    token_manifest_check({{(dir / file).string(), tokens}}, token_bytes, vocab);
  }
  fs::path dir;
  json manifest;
};

TEST_F(TokenManifestTest, AMatchingSetAndOneWithoutAManifestPass) {
  check(50257);  // no manifest.json: nothing to check
  std::ofstream(dir / "manifest.json") << R"({"name": "someone else's"})";
  check(50257);  // not fsdpgen prepare's
  write(manifest);
  check(50257);
  check(50304);  // a vocabulary padded past the tokenizer's
}

TEST_F(TokenManifestTest, ATokenizerBeyondTheModelsVocabIsNamed) {
  write(manifest);
  expect_error([&] { check(256); },
               {(dir / "manifest.json").string(), "the tokenizer 'gpt2' of 50257 tokens",
                "ids up to 50256", "the model's vocab is 256"});
  manifest["tokenizer"]["vocab_size"] = 100;  // a special token past the vocabulary it states
  write(manifest);
  expect_error([&] { check(256); }, {"special token <|endoftext|>", "id 50256", "vocab 256"});
}

TEST_F(TokenManifestTest, AShardItDoesNotListAsItIsIsNamed) {
  write(manifest);
  expect_error([&] { check(50257, 101); }, {"train_000000.bin: holds 101 tokens", "lists 100"});
  expect_error([&] { check(50257, 100, "other.bin"); }, {"other.bin: not a shard that"});
  expect_error([&] { check(50257, 100, "train_000000.bin", 4); },
               {"holds uint32 tokens", "says uint16"});
  manifest["splits"].erase("train");  // a stopped preparation: its whole shards are in resume
  manifest["resume"] = {
      {"splits", {{"train", {{"shards", {{{"file", "train_000000.bin"}, {"tokens", 100}}}}}}}}};
  write(manifest);
  check(50257);
}

TEST_F(TokenManifestTest, OneSetIsOneTokenizers) {
  write(manifest);
  fs::create_directories(dir / "more");
  json other = manifest;
  std::ofstream(dir / "more" / "manifest.json") << other.dump();
  const std::vector<token_file> files = {{(dir / "train_000000.bin").string(), 100},
                                         {(dir / "more" / "train_000000.bin").string(), 100}};
  token_manifest_check(files, 2, 50257);
  other["tokenizer"]["name"] = "llama3";
  other["tokenizer"]["sha256"] = "fedcba9876543210";
  std::ofstream(dir / "more" / "manifest.json") << other.dump();
  expect_error(
      [&] { token_manifest_check(files, 2, 50257); },
      {(dir / "more" / "manifest.json").string(), "tokenizer 'llama3' (sha256 fedcba987654)",
       "by 'gpt2' (sha256 0123456789ab)", "one tokenizer's tokens"});
}

TEST_F(TokenManifestTest, ABadManifestIsNamed) {
  std::ofstream(dir / "manifest.json") << "{";
  expect_error([&] { check(50257); }, {"manifest.json: not JSON"});
  manifest["format"] = "fsdpgen-tokens/2";
  write(manifest);
  expect_error([&] { check(50257); }, {"format 'fsdpgen-tokens/2'", "reads 'fsdpgen-tokens/1'"});
  manifest["format"] = "fsdpgen-tokens/1";
  manifest["tokenizer"].erase("vocab_size");
  write(manifest);
  expect_error([&] { check(50257); }, {"manifest.json: no key 'vocab_size'"});
}

}  // namespace
