// token_manifest: the manifest.json that `fsdpgen prepare` writes beside a
// token set (docs/prepare.md), read back when a run opens the set and checked
// against the model that trains on it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// One token file of a set as the reader found it: its path and token count.
struct token_file {
  std::string path;
  int64_t tokens = 0;
};

// Checks each file against the manifest.json in its directory when that is a
// manifest of `fsdpgen prepare` (format "fsdpgen-tokens/1"; any other
// manifest.json, or none, checks nothing): the tokenizer's vocabulary and
// each special token's id must be < vocab, the model's; the file must be a
// shard the manifest lists, with the token count it lists and its dtype
// (token_bytes 2: uint16, 4: uint32); the manifests of one set must name one
// tokenizer (its SHA-256). Throws std::runtime_error naming the manifest, the
// file and the mismatch.
void token_manifest_check(const std::vector<token_file>& files, int token_bytes, int64_t vocab);

// What a token set's manifest says of the tokenizer that made it: the
// special tokens its documents use and the tokenizer's files beside it.
struct token_set_tokenizer {
  std::string manifest;  // the manifest.json read
  std::string name;      // the tokenizer's name
  std::string eot;       // the end-of-text token each document ends with
  int64_t eot_id = -1;
  std::string bos;               // the token each document begins with; "" none
  int64_t bos_id = -1;           // -1: none
  std::string tokenizer_json;    // the tokenizer.json the manifest's "file" names, beside it;
                                 // "" when it names none
  std::string tokenizer_config;  // tokenizer_config.json beside it; "" when absent
};

// The tokenizer of the token set `token_file` belongs to: what the
// manifest.json in its directory says (a run finds its tokenizer as the
// tokenizer.json beside the manifest of its training files); nullopt when
// there is no manifest of `fsdpgen prepare` there. A manifest that names a
// "file" which is not there, or is malformed, throws std::runtime_error
// naming it.
std::optional<token_set_tokenizer> token_set_tokenizer_of(const std::string& token_file);
