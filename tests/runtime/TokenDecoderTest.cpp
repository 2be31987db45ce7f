// TokenDecoderTest: ids to text (runtime/generate/token_decoder.h) equal
// Hugging Face tokenizers' decode(ids, skip_special_tokens=False) over many
// ids: tools/decode_reference.py (build/python's tokenizers; not needed here)
// wrote tests/runtime/decode_reference/<tokenizer>/{tokenizer.json,
// expected.json} for byte-level BPEs as GPT-2's and Llama 3's, a Llama 2
// style one (Replace, ByteFallback, Fuse, Strip) and Metaspace: every id
// alone, random sequences (partial UTF-8, lone byte tokens) and encoded lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/generate/token_decoder.h"

namespace {

namespace fs = std::filesystem;
const fs::path kFixture = fs::path(FSDPGEN_SOURCE_DIR) / "tests" / "runtime" / "decode_reference";

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class TokenDecoder : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenDecoder, EqualsTheTokenizersLibrary) {
  const fs::path dir = kFixture / GetParam();
  const token_decoder d = token_decoder::from_file((dir / "tokenizer.json").string());
  const nlohmann::json cases = nlohmann::json::parse(read(dir / "expected.json"));
  int wrong = 0;
  for (const nlohmann::json& c : cases) {
    const std::vector<int32_t> ids = c.at("ids");
    const std::string got = d.decode(ids), want = c.at("text");
    if (got != want && ++wrong <= 5)
      ADD_FAILURE() << "ids " << c.at("ids").dump() << ": got '" << got << "', want '" << want
                    << "'";
  }
  EXPECT_EQ(wrong, 0) << "of " << cases.size();
  EXPECT_GT(cases.size(), 700u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, TokenDecoder,
                         ::testing::Values("gpt2", "llama3", "sentencepiece", "metaspace"),
                         [](const auto& info) { return std::string(info.param); });

TEST(TokenDecoderBytes, IdsAreBytesAndInvalidUtf8IsReplaced) {
  const token_decoder d = token_decoder::bytes();
  EXPECT_EQ(d.vocab(), 256);
  const std::vector<int32_t> hi = {'h', 'i', ' ', 0xC3, 0xA9};  // "hi é"
  EXPECT_EQ(d.decode(hi), "hi \xC3\xA9");
  const std::vector<int32_t> broken = {'a', 0xE6, 0x97, 'b', 0xFF, 300};  // 300: no token
  EXPECT_EQ(d.decode(broken),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(TokenDecoderBytes, Utf8LossyReplacesMaximalSubparts) {
  // As Rust's String::from_utf8_lossy: one U+FFFD per maximal invalid subpart.
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x99"), r);  // a truncated 4-byte sequence
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x99\x82"), "\xF0\x9F\x99\x82");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);          // overlong: each byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xE2\x82x"), r + "x");
}

TEST(TokenDecoderErrors, UnsupportedDecoderAndBadFilesAreNamed) {
  try {
    token_decoder::from_json(
        R"({"model": {"vocab": {"a": 0}}, "decoder": {"type": "WordPiece", "prefix": "##"}})",
        "tok.json");
    FAIL() << "an unsupported decoder was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "tok.json: decoder type 'WordPiece' cannot run here; fsdpgen decodes ByteLevel, "
                 "Metaspace and Sequences of Replace (a string), ByteFallback, Fuse and Strip");
  }
  try {
    token_decoder::from_json(
        R"({"model": {"vocab": {"a": 0}}, "decoder": {"type": "Replace", "pattern": {"Regex": "x+"}, "content": ""}})",
        "tok.json");
    FAIL() << "a regex Replace was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "tok.json: decoder Replace with pattern {\"Regex\":\"x+\"} cannot run "
                 "here (a String pattern can)");
  }
  EXPECT_THROW(token_decoder::from_json("{not json", "tok.json"), std::runtime_error);
  try {
    token_decoder::from_json(R"({"model": {}})", "tok.json");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tok.json: no model.vocab: not a tokenizers tokenizer.json");
  }
  EXPECT_THROW(token_decoder::from_file("/nonexistent/tokenizer.json"), std::runtime_error);
}

TEST(TokenDecoderErrors, NoDecoderJoinsTokensWithSpaces) {
  const token_decoder d = token_decoder::from_json(
      R"({"model": {"vocab": {"w0": 0, "w1": 1}}, "decoder": null,
          "added_tokens": [{"id": 2, "content": "<|endoftext|>"}]})",
      "tok.json");
  const std::vector<int32_t> ids = {1, 0, 2, 7};
  EXPECT_EQ(d.decode(ids), "w1 w0 <|endoftext|>");
  EXPECT_EQ(d.id_of("<|endoftext|>"), 2);
  EXPECT_EQ(d.id_of("nope"), -1);
}

}  // namespace
