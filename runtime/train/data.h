// data: the token sources a training step reads: a seeded synthetic stream,
// a byte-level text file, or a set of llm.c token files (GPT-2's uint16 or
// Llama 3's uint32). Files are mapped read-only, never copied: the ranks of a
// node share them through the page cache. Every source is a function of the
// global sequence index (and, shuffled, of the seed), so that any rank can
// fill any sequence and a resumed run reads what the uninterrupted one would.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

enum class data_kind { synthetic, text, tokens };

struct data_config {
  data_kind kind = data_kind::synthetic;
  uint64_t seed = 0;               // synthetic only: the stream's seed
  std::vector<std::string> paths;  // text: one file; tokens: files and glob patterns (glob(3)),
                                   // each pattern's matches sorted, in the order given
  int64_t vocab = 0;               // V: every token is < V
  int64_t context = 0;             // T: tokens per sequence
  bool shuffle = false;            // text and tokens: each epoch in a seeded order
  uint64_t shuffle_seed = 0;       // that order's seed (dataloader_set_shuffle_seed)
  std::string role = "data";       // how messages name the source: "data" or "val"
  // text into a vocabulary larger than the bytes' (kByteVocab): trained on
  // only when allowed (--allow-bytes, or a spec's text(..., allow_bytes = true)).
  bool allow_bytes = false;
};

// One file mapped read-only (unmapped when destroyed).
struct mapped_file {
  std::string path;
  const std::byte* bytes = nullptr;
  int64_t size = 0;
  mapped_file() = default;
  mapped_file(mapped_file&& o) noexcept;
  mapped_file& operator=(mapped_file&& o) noexcept;
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();
};

struct data_error_slot;  // the first bad token id a fill met (data.cpp)

// Opened once: the files' mappings (or the synthetic tables), so that filling
// a batch reads memory only.
struct dataloader {
  data_config config;
  std::vector<mapped_file> files;  // text and tokens: in stream order
  std::vector<int64_t> starts;     // (files + 1) first token of each file in the stream, then N
  int64_t header_bytes = 0;        // before each file's tokens: 1024 for token files, 0 for text
  int token_bytes = 1;             // 1 (text), 2 (GPT-2 tokens) or 4 (Llama 3 tokens)
  int64_t windows = 0;             // W = (N - 1) / T: the sequences of one epoch
  std::vector<int32_t> alphabet;   // (A) synthetic: the token id of each letter
  std::vector<int32_t> successor;  // (A) synthetic: each letter's likely successor letter
  std::unique_ptr<data_error_slot> error;
  dataloader();
  dataloader(dataloader&&) noexcept;
  dataloader& operator=(dataloader&&) noexcept;
  ~dataloader();
};

// Expands the patterns, maps every file and checks its header (token files:
// magic, version, count against the size, one format for the whole set);
// reads no token. Throws std::runtime_error naming the file and the problem.
dataloader dataloader_open(const data_config& config);

// --trace-data (a testing aid): where a fill read each sequence, as one line
// appended to fd in one write(2):
//   PASS INDEX RANK MICRO SEQUENCE HASH OFFSET SOURCE
// PASS: train or val; INDEX: the 0-based step, or the validation pass;
// SEQUENCE: the global sequence index filled; HASH: FNV-1a 64 (16 hex
// digits) of its T + 1 token ids as read (int32, little-endian); OFFSET and
// SOURCE: a synthetic stream's sequence as its generator was given it and
// "synthetic(seed=S)", or the token offset of a window's first token in the
// file SOURCE that holds it.
struct data_trace {
  int fd = -1;
  const char* pass = "train";
  int64_t index = 0, rank = 0, micro = 0;
};

// Sequence j is T+1 consecutive tokens of the stream; tokens gets its first
// T and targets its last T. Fills rows 0..count-1 of tokens and targets,
// both (count, T), with the global sequences first_sequence.. on. A file
// source of W windows: sequence j is window perm_e(j mod W) of epoch e = j /
// W, window w being tokens [w*T, w*T + T + 1) of the files in order (it may
// span two); perm_e is the identity unless shuffled. A token >= vocab is
// written as 0 and the first such recorded (dataloader_take_error), as is a
// failed trace write. Does not allocate; one thread at a time.
void dataloader_fill(const dataloader& loader, int64_t first_sequence, int64_t count,
                     int32_t* tokens, int32_t* targets, const data_trace* trace = nullptr);

// Where global sequence j is read from, for a log line: "train.bin byte
// offset 4096" (its first token's), or "synthetic(seed=7) sequence 12".
std::string dataloader_locate(const dataloader& loader, int64_t sequence);

// W, the sequences of one epoch (synthetic: 0, an endless stream).
int64_t dataloader_sequences(const dataloader& loader);
// The 0-based epoch global sequence j is in (synthetic: 0).
int64_t dataloader_epoch(const dataloader& loader, int64_t sequence);
// The shuffled order's seed, known only once the run's seed is (a checkpoint's).
void dataloader_set_shuffle_seed(dataloader& loader, uint64_t seed);
// "" or where the first token id >= vocab since the last call was read, with
// its value; clears it.
std::string dataloader_take_error(const dataloader& loader);

// One line for logs, e.g. "tokens train_*.bin: 3 files, 641 tokens (uint16), 40 sequences of
// 16, shuffled" (no seed: checkpoints compare it across runs).
std::string dataloader_describe(const dataloader& loader);

// The permutation of [0, n) that shuffled epoch `epoch` reads windows in:
// position -> window, a keyed Feistel network with cycle walking (no table).
int64_t data_shuffle(uint64_t seed, int64_t epoch, int64_t position, int64_t n);
