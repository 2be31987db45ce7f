// eval_file: llm.c's multiple-choice evaluation file (HellaSwag's, written
// by llm.c's dev/data/data_common.py write_evalfile or by `fsdpgen
// prepare-eval`), read whole and checked against the model that scores it.
//
// Layout (little-endian): a header of 256 int32: magic 20240522, version,
// examples, the longest example's bytes; the rest 0. Then the examples, each
// a run of fields of one width: uint16 in version 1 (llm.c's), uint32 in
// version 2 (fsdpgen's, for vocabularies past 65535 such as Llama 3's):
//   delimiter (all ones: 65535, or 2^32 - 1), the example's bytes (these
//   fields included), its index (0, 1, ... in file order), its label (the
//   correct completion, 0-based), its completion count, the context's token
//   count and tokens, then each completion's token count and tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

inline constexpr int32_t kEvalFileMagic = 20240522;
inline constexpr int64_t kEvalFileHeaderBytes = 256 * 4;
// Far above any real evaluation file (HellaSwag's validation split: 3.6 MB).
inline constexpr int64_t kEvalFileMaxBytes = int64_t{1} << 30;

struct eval_example {
  int64_t label = 0;                              // the correct completion
  std::vector<int32_t> context;                   // shared by every candidate
  std::vector<std::vector<int32_t>> completions;  // the candidates' endings
};

struct eval_file {
  std::string path;
  int version = 1;  // 1: uint16 fields, 2: uint32
  std::vector<eval_example> examples;
};

// Reads the file at `path` and checks it: the header (magic, version, the
// example count against what follows), every example's delimiter, byte
// count, index, label (below its completion count), tokens (below `vocab`,
// a context and completions of at least one), and that context plus
// completion fit the model's `context` tokens (one candidate is one
// sequence). Throws std::runtime_error naming the file, the example (its
// index and byte offset) and the problem.
eval_file eval_file_read(const std::string& path, int64_t vocab, int64_t context);
