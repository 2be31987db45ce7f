// The model directory `--save DIR` and `fsdpgen merge CKPT -o DIR` write
// (runtime/files/hf_directory.h): the same files from either, config.json and
// generation_config.json with the special-token ids of the token set the run
// trained on (read back with the project's config reader), its tokenizer
// files, and every output that cannot be written refused before a step.
// tests/tools/hf_out_test.py loads such a directory with transformers.
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/files/hf_config.h"
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kEndOfText = 63;  // the hand-made tokenizer's, the last id of the vocab of 64
const char* const kTokenizerJson = "{\"version\": \"1.0\", \"model\": \"hand-made\"}\n";

// A token set as `fsdpgen prepare` writes one, made by hand: train_000000.bin
// (ids below 64, each 50th the end-of-text), manifest.json naming the
// tokenizer (documents end with <|eot|> = 63 and begin with no BOS),
// tokenizer.json and tokenizer_config.json.
void write_token_set(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<int32_t> ids = random_token_ids(4000, kEndOfText, 5);
  for (size_t i = 49; i < ids.size(); i += 50)
    ids[i] = kEndOfText;
  write_token_file(dir / "train_000000.bin", ids);
  const json manifest = {
      {"format", "fsdpgen-tokens/1"},
      {"tokenizer",
       {{"name", "hand-made"},
        {"path", "/nowhere/tokenizer.json"},
        {"sha256", std::string(64, 'a')},
        {"file", "tokenizer.json"},
        {"vocab_size", 64},
        {"special_tokens", {{"<|eot|>", kEndOfText}}},
        {"eot", {{"token", "<|eot|>"}, {"id", kEndOfText}}},
        {"bos", nullptr}}},
      {"dtype", "uint16"},
      {"complete", true},
      {"splits",
       {{"train", {{"shards", {{{"file", "train_000000.bin"}, {"tokens", ids.size()}}}}}},
        {"val", {{"shards", json::array()}}}}}};
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  std::ofstream(dir / "tokenizer.json") << kTokenizerJson;
  std::ofstream(dir / "tokenizer_config.json")
      << json({{"tokenizer_class", "PreTrainedTokenizerFast"},
               {"bos_token", "<|eot|>"},
               {"eos_token", "<|eot|>"}})
             .dump(1);
}

std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir))
    names.insert(e.path().filename().string());
  return names;
}

json json_of(const fs::path& p) {
  return json::parse(file_bytes(p));
}

CmdResult merge_in(const fs::path& dir, const std::string& args) {
  return run_command(fmt::format("cd {} && {} merge {}", dir.string(), FSDPGEN_BIN, args));
}

// --save out/ of a run on a token set: the weights, config.json (the
// project's reader finds this model in it, no problem) with the set's
// end-of-text id as eos and bos, generation_config.json with it as pad too,
// the set's tokenizer.json as it is and its tokenizer_config.json with the
// model's context as model_max_length. The checkpoint merged from another
// directory is the same directory byte for byte, and the same weights as
// one .safetensors file.
TEST(HfDirectory, SaveAndMergeWriteTheTokenSetsIdsAndTokenizer) {
  E2eConfig c;  // gpt2, vocab 64, context 16, 2 ranks full_shard
  c.steps = 2;
  const fs::path dir = e2e_dir("hf_directory_tokens");
  fs::remove_all(dir / "ckpt");
  fs::remove_all(dir / "out");
  write_token_set(dir / "data");
  const fs::path bin = shared_binary(dir, c.spec());
  const CmdResult r =
      run_binary(c.world, bin, "--data data/train_000000.bin --checkpoint-every 2 --save out/");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("saved: a model directory: the weights, config.json (bos 63, eos 63), "
                       "generation_config.json, tokenizer.json, tokenizer_config.json (the "
                       "tokenizer of data/manifest.json)"),
            std::string::npos)
      << r.out;
  const fs::path out = dir / "out";
  EXPECT_EQ(names_in(out),
            (std::set<std::string>{"config.json", "generation_config.json", "model.safetensors",
                                   "tokenizer.json", "tokenizer_config.json"}));
  EXPECT_FALSE(fs::exists(dir / "out.partial"));

  std::vector<hf_problem> problems;
  const hf_model m = hf_model_of_config((out / "config.json").string(), &problems);
  EXPECT_TRUE(problems.empty()) << problems.size() << ": " << problems[0].key;
  EXPECT_FALSE(m.llama);
  EXPECT_EQ(m.vocab, 64);
  EXPECT_EQ(m.width, 32);
  EXPECT_EQ(m.context, 16);
  const json config = json_of(out / "config.json");
  EXPECT_EQ(config.at("bos_token_id"), kEndOfText);
  EXPECT_EQ(config.at("eos_token_id"), kEndOfText);
  EXPECT_EQ(json_of(out / "generation_config.json"), json({{"bos_token_id", kEndOfText},
                                                           {"eos_token_id", kEndOfText},
                                                           {"pad_token_id", kEndOfText}}));
  EXPECT_EQ(file_bytes(out / "tokenizer.json"), kTokenizerJson);
  const json tokenizer_config = json_of(out / "tokenizer_config.json");
  EXPECT_EQ(tokenizer_config.at("model_max_length"), 16);
  EXPECT_EQ(tokenizer_config.at("eos_token"), "<|eot|>");
  EXPECT_EQ(tokenizer_config.at("tokenizer_class"), "PreTrainedTokenizerFast");

  // merge from another directory finds the run's --data from the run's directory.
  const fs::path elsewhere = e2e_dir("hf_directory_tokens_elsewhere");
  fs::remove_all(elsewhere / "merged");
  const std::string ckpt = (dir / "ckpt").string();
  const CmdResult merged = merge_in(elsewhere, fmt::format("{} -o merged", ckpt));
  ASSERT_EQ(merged.status, 0) << merged.out;
  EXPECT_EQ(merged.out.find("note:"), std::string::npos) << merged.out;
  EXPECT_EQ(names_in(elsewhere / "merged"), names_in(out));
  for (const std::string& name : names_in(out))
    EXPECT_TRUE(file_bytes(elsewhere / "merged" / name) == file_bytes(out / name)) << name;
  ASSERT_EQ(merge_in(elsewhere, fmt::format("{} -o one.safetensors", ckpt)).status, 0);
  EXPECT_TRUE(file_bytes(elsewhere / "one.safetensors") == file_bytes(out / "model.safetensors"));
}

// Without a token set (synthetic data) the ids are the vocabulary's rule
// (none for 64 tokens) and there is no tokenizer, said by both writers; a
// model directory there is replaced by the next --save; a path that is a
// file, a directory holding other files, and a missing parent are each
// refused on every rank before the first step, the file and directory left
// as they were.
TEST(HfDirectory, WithoutATokenSetAndOutputsThatCannotBeWritten) {
  E2eConfig c;
  c.steps = 1;
  const fs::path dir = e2e_dir("hf_directory_synthetic");
  fs::remove_all(dir / "ckpt");
  const fs::path bin = shared_binary(dir, c.spec());
  CmdResult r = run_binary(c.world, bin, "--checkpoint-every 1 --save out");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("config.json (bos none, eos none), generation_config.json; no tokenizer: "
                       "the training data is no token set of fsdpgen prepare"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(names_in(dir / "out"),
            (std::set<std::string>{"config.json", "generation_config.json", "model.safetensors"}));
  EXPECT_TRUE(json_of(dir / "out/generation_config.json").at("eos_token_id").is_null());
  const CmdResult m = merge_in(dir, "ckpt -o merged");
  ASSERT_EQ(m.status, 0) << m.out;
  EXPECT_NE(m.out.find("note: no tokenizer for the model directory: the spec's data is synthetic"),
            std::string::npos)
      << m.out;

  const std::string before = file_bytes(dir / "out/model.safetensors");
  r = run_binary(c.world, bin, "--steps 2 --save out/");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(file_bytes(dir / "out/model.safetensors") == before) << "not replaced";
  EXPECT_FALSE(fs::exists(dir / "out.partial"));

  fs::remove_all(dir / "notes");
  fs::create_directories(dir / "notes");
  std::ofstream(dir / "notes" / "mine.txt") << "keep me";
  std::ofstream(dir / "plain") << "a file";
  struct refused {
    std::string flag, said;
  };
  for (const refused& x :
       std::vector<refused>{{"--save notes/",
                             "--save notes/: cannot write a model directory there: it holds "
                             "mine.txt, which no model directory has"},
                            {"--save plain",
                             "--save plain: cannot write a model directory there: it exists and "
                             "is not a directory (a path ending in .safetensors names one file)"},
                            {"--save none/model",
                             "--save none/model: cannot write a model directory there: none "
                             "is not a directory"}}) {
    const CmdResult bad = run_binary(c.world, bin, "--steps 2 " + x.flag);
    EXPECT_EQ(bad.status, 1) << bad.out;
    EXPECT_NE(bad.out.find("error: " + x.said), std::string::npos) << bad.out;
    EXPECT_EQ(bad.out.find("step 1/2"), std::string::npos) << "trained first:\n" << bad.out;
  }
  EXPECT_EQ(file_bytes(dir / "notes" / "mine.txt"), "keep me");
  EXPECT_EQ(names_in(dir / "notes"), std::set<std::string>{"mine.txt"});
  EXPECT_EQ(file_bytes(dir / "plain"), "a file");
  const CmdResult bad_merge = merge_in(dir, "ckpt -o notes");
  EXPECT_EQ(bad_merge.status, 1) << bad_merge.out;
  EXPECT_NE(bad_merge.out.find("notes: cannot write a model directory there: it holds mine.txt"),
            std::string::npos)
      << bad_merge.out;
  EXPECT_EQ(names_in(dir / "notes"), std::set<std::string>{"mine.txt"});
}

}  // namespace
}  // namespace fsdpgen::test
