// token_manifest: the manifest.json that `fsdpgen prepare` writes beside a
// token set (docs/prepare.md), read back when a run opens the set and checked
// against the model that trains on it.
#pragma once

#include <cstdint>
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
