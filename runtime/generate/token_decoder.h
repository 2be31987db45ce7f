// token_decoder: ids to text as Hugging Face tokenizers' decode(ids,
// skip_special_tokens=False) writes it, from a tokenizer.json: each id's
// token (the model's vocabulary, or an added token's content), then the
// decoder: ByteLevel (GPT-2, Llama 3), the sentencepiece-style Sequence of
// Replace (a string pattern), ByteFallback, Fuse and Strip (Llama 2,
// Mistral), Metaspace, or none (tokens joined by spaces). Or, for a
// byte-level model without a tokenizer, id i is byte i. Text is valid UTF-8:
// invalid bytes become U+FFFD as the library's lossy conversion makes them.
// No encoder: prompt text is encoded by the tokenizers library (Python).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

class token_decoder {
 public:
  // From tokenizer.json's text; `where` names it in errors. std::runtime_error
  // naming where and the problem: not JSON, no model vocabulary, an id twice,
  // or a decoder it cannot run (its type named, with those it can).
  static token_decoder from_json(std::string_view text, const std::string& where);
  static token_decoder from_file(const std::string& path);
  // Id i is byte i, for i < 256.
  static token_decoder bytes();

  // The text of ids; ids no token has are left out, as the library does.
  std::string decode(std::span<const int32_t> ids) const;
  // One more than the largest id with a token.
  int64_t vocab() const { return static_cast<int64_t>(tokens_.size()); }
  // The id of a token (model or added), or -1.
  int64_t id_of(std::string_view token) const;

  struct step {
    enum kind { byte_level, replace, byte_fallback, fuse, strip, metaspace } what;
    std::string pattern, content;  // replace; strip's content; metaspace's replacement
    int64_t start = 0, stop = 0;   // strip
    bool prepend = true;           // metaspace: the first token's leading space was added
  };

 private:
  bool raw_bytes_ = false;
  bool join_with_spaces_ = false;    // no decoder
  std::vector<std::string> tokens_;  // by id ("" where none)
  std::vector<bool> present_;
  std::vector<step> steps_;
};

// bytes as Rust's String::from_utf8_lossy reads them: each maximal invalid
// subsequence becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);
