// data: the token sources a training step reads: a seeded synthetic stream,
// a byte-level text file, or llm.c's .bin token file. Every source is a
// function of the global sequence index, so any rank can fill any sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

enum class data_kind { synthetic, text, tokens };

struct data_config {
  data_kind kind = data_kind::synthetic;
  uint64_t seed = 0;               // synthetic only
  std::vector<std::string> paths;  // text and tokens: the file (the first only, for now)
  int64_t vocab = 0;               // V: every token is < V
  int64_t context = 0;             // T: tokens per sequence
  bool shuffle = false;            // not yet read
  uint64_t shuffle_seed = 0;       // not yet read
  std::string role = "data";       // how messages name the source: "data" or "val"
};

// Opened once; holds the whole file's tokens or the synthetic tables, so that
// filling a batch reads memory only.
struct dataloader {
  data_config config;
  int64_t file_bytes = 0;          // text and tokens: size of the file
  std::vector<uint16_t> stream;    // (ntokens) text and tokens: the file as token ids
  int64_t windows = 0;             // W = (ntokens - 1) / T: distinct sequences of a file
  std::vector<int32_t> alphabet;   // (A) synthetic: the token id of each letter
  std::vector<int32_t> successor;  // (A) synthetic: each letter's likely successor letter
};

// Reads and validates the source; throws std::runtime_error naming the path
// and the problem (bad magic or version, size mismatch, token >= vocab, too
// few tokens for one sequence of T+1).
dataloader dataloader_open(const data_config& config);

// Sequence j is T+1 consecutive tokens; tokens gets its first T and targets
// its last T. Fills rows 0..count-1 of tokens and targets, both (count, T),
// with the global sequences first_sequence..first_sequence+count-1. A file
// source has W windows: sequence j is tokens [w*T, w*T+T+1) with w = j mod W.
// Does not allocate.
void dataloader_fill(const dataloader& loader, int64_t first_sequence, int64_t count,
                     int32_t* tokens, int32_t* targets);

// One line for logs, e.g. "text input.txt: 1,115,394 bytes, 8,714 sequences of 128".
std::string dataloader_describe(const dataloader& loader);

int64_t dataloader_sequences(const dataloader&);
int64_t dataloader_epoch(const dataloader&, int64_t sequence);
void dataloader_set_shuffle_seed(dataloader&, uint64_t seed);
std::string dataloader_take_error(const dataloader&);
