// data: synthetic token streams, byte-level text and llm.c token files
// (mapped and checked at open), filled into (B, T) token and target rows.
#include "runtime/train/data.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "runtime/files/file_io.h"
#include "runtime/files/token_manifest.h"
#include "runtime/fnv1a.h"
#include "runtime/human.h"
#include "runtime/limits.h"

struct data_error_slot {
  std::mutex mutex;
  std::string first;  // "" while no bad token was met
};

mapped_file::mapped_file(mapped_file&& o) noexcept
    : path(std::move(o.path)), bytes(o.bytes), size(o.size) {
  o.bytes = nullptr;
  o.size = 0;
}

mapped_file& mapped_file::operator=(mapped_file&& o) noexcept {
  std::swap(path, o.path);  // o unmaps what this held
  std::swap(bytes, o.bytes);
  std::swap(size, o.size);
  return *this;
}

mapped_file::~mapped_file() {
  if (bytes && size > 0) munmap(const_cast<std::byte*>(bytes), static_cast<size_t>(size));
}

dataloader::dataloader() : error(std::make_unique<data_error_slot>()) {}
dataloader::dataloader(dataloader&&) noexcept = default;
dataloader& dataloader::operator=(dataloader&&) noexcept = default;
dataloader::~dataloader() = default;

namespace {

// The synthetic stream. Tokens come from an alphabet of A = min(V, 256) ids
// chosen by the seed; each letter has one likely successor (a seeded
// permutation of the alphabet). Position 0 is a uniform letter; after that
// each position either
//   - continues a copy of an earlier span of the same sequence, or
//   - (probability 1/32, from position 16 on) starts such a copy: 8-32 tokens
//     from a uniformly chosen earlier start, or
//   - (7/8 of the rest) is the successor of the previous letter, or
//   - is a uniform letter.
// So the loss falls from ln(V) to ln(A) = 5.5 nats once the alphabet is
// learned, to about 1.2 nats with the successor table (1.07 for 7/8 successor
// plus uniform noise, the rest at copy starts), and to about 0.8 nats for a
// model whose attention also copies spans (about 38% of positions lie in
// copies). Integer arithmetic only, so every machine produces the same tokens.
constexpr int64_t kAlphabetMax = 256;
constexpr uint64_t kCopyOdds = 32;  // a copy starts at 1 in 32 free positions
constexpr int64_t kCopyFrom = 16;   // ...from this position on
constexpr int64_t kCopyMin = 8, kCopyMax = 32;
constexpr uint64_t kNoiseOdds = 8;  // 1 in 8 free positions is uniform noise

// splitmix64: a sequential generator whose state is one counter, used both
// for the tables and (seeded by the sequence index) for each sequence.
struct splitmix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

splitmix64 sequence_rng(uint64_t seed, int64_t sequence) {
  splitmix64 mix{seed ^ 0x5EC0E11CE5EEDull};
  splitmix64 rng{mix.next() ^ static_cast<uint64_t>(sequence)};
  rng.state = rng.next();  // decorrelate neighbouring sequence indices
  return rng;
}

void open_synthetic(dataloader& d) {
  const int64_t V = d.config.vocab, A = std::min(V, kAlphabetMax);
  splitmix64 rng{d.config.seed};
  while (static_cast<int64_t>(d.alphabet.size()) < A) {
    int32_t id = static_cast<int32_t>(rng.below(V));
    if (std::find(d.alphabet.begin(), d.alphabet.end(), id) == d.alphabet.end())
      d.alphabet.push_back(id);
  }
  d.successor.resize(A);
  for (int64_t a = 0; a < A; a++)
    d.successor[a] = static_cast<int32_t>(a);
  for (int64_t a = A - 1; a > 0; a--)  // Fisher-Yates
    std::swap(d.successor[a], d.successor[rng.below(a + 1)]);
}

// Writes the letters of sequence j: positions 0..T-1 into row, position T
// into *last; then maps letters to token ids.
void fill_synthetic(const dataloader& d, int64_t j, int32_t* row, int32_t* last) {
  const int64_t T = d.config.context, A = static_cast<int64_t>(d.alphabet.size());
  splitmix64 rng = sequence_rng(d.config.seed, j);
  int32_t x = static_cast<int32_t>(rng.below(A));
  row[0] = x;
  int64_t copy_from = 0, copy_left = 0;
  for (int64_t t = 1; t <= T; t++) {
    if (copy_left == 0 && t >= kCopyFrom && rng.next() % kCopyOdds == 0) {
      copy_left = std::min(kCopyMin + rng.below(kCopyMax - kCopyMin + 1), t);
      copy_from = rng.below(t - copy_left + 1);
    }
    if (copy_left > 0) {
      x = row[copy_from++];
      copy_left--;
    } else if (rng.next() % kNoiseOdds != 0) {
      x = d.successor[x];
    } else {
      x = static_cast<int32_t>(rng.below(A));
    }
    (t < T ? row[t] : *last) = x;
  }
  for (int64_t t = 0; t < T; t++)
    row[t] = d.alphabet[row[t]];
  *last = d.alphabet[*last];
}

// llm.c's token files: 256 int32 (magic, version, token count, unused), then
// the tokens, little-endian: GPT-2's as uint16, Llama 3's as uint32.
struct token_format {
  int32_t magic, version;
  int bytes;
  const char* name;
};
constexpr token_format kTokenFormats[] = {{20240520, 1, 2, "uint16"}, {20240801, 7, 4, "uint32"}};
constexpr int64_t kTokensHeaderBytes = 1024;  // 256 int32
static_assert(std::endian::native == std::endian::little, "token files are read in place");

// Why a .bin file may not be tokens at all, and what to do about it.
constexpr const char* kBinIsTokens =
    "a .bin file is read as an llm.c token file; to train on a text file, give it another "
    "extension (e.g. --data input.txt)";

// Closes a descriptor on every path out of a function.
struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

// advice: how the windows will be read (madvise): MADV_RANDOM when shuffled,
// so that the kernel reads no more than the pages touched, MADV_SEQUENTIAL in
// file order, so that it reads ahead.
mapped_file map_file(const std::string& path, int advice) {
  mapped_file f;
  const int fd = file_open_regular(path, &f.size);
  const fd_guard guard{fd};
  f.path = path;
  if (f.size == 0) return f;
  void* p = mmap(nullptr, static_cast<size_t>(f.size), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(
        fmt::format("{}: cannot map its {} bytes: {}", path, f.size, strerror(errno)));
  madvise(p, static_cast<size_t>(f.size), advice);  // advice only: its failure changes nothing
  f.bytes = static_cast<const std::byte*>(p);
  return f;
}

bool has_wildcard(const std::string& s) {
  return s.find_first_of("*?[") != std::string::npos;
}

// The files the paths name: each pattern's matches sorted, in the order given.
std::vector<std::string> expand(const data_config& c) {
  if (c.paths.empty()) throw std::runtime_error(fmt::format("{}: no file given", c.role));
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& pattern : c.paths) {
    std::vector<std::string> matches;
    if (!has_wildcard(pattern)) {
      matches.push_back(pattern);
    } else {
      glob_t g{};
      const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
      for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
        matches.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      if (rc == GLOB_NOMATCH || (rc == 0 && matches.empty()))
        throw std::runtime_error(fmt::format("{}: no file matches this pattern", pattern));
      if (rc != 0)
        throw std::runtime_error(fmt::format("{}: cannot list the files it matches ({})", pattern,
                                             rc == GLOB_ABORTED ? "a directory cannot "
                                                                  "be read"
                                                                : "out of memory"));
    }
    for (std::string& m : matches) {
      if (!seen.insert(m).second)
        throw std::runtime_error(
            fmt::format("{}: named twice (by {}); each file is read once per epoch", m, pattern));
      out.push_back(std::move(m));
    }
  }
  return out;
}

// A token file's format, from its header; throws naming what is wrong.
const token_format& check_token_header(const mapped_file& f) {
  if (f.size < kTokensHeaderBytes)
    throw std::runtime_error(
        fmt::format("{}: file is {} bytes, shorter than the {}-byte header of an llm.c token "
                    "file ({})",
                    f.path, f.size, kTokensHeaderBytes, kBinIsTokens));
  int32_t header[3];
  std::memcpy(header, f.bytes, sizeof header);
  const token_format* format = nullptr;
  for (const token_format& t : kTokenFormats)
    if (header[0] == t.magic) format = &t;
  if (!format)
    throw std::runtime_error(fmt::format(
        "{}: magic number is {}, expected {} (GPT-2 tokens) or {} (Llama 3 tokens) ({})", f.path,
        header[0], kTokenFormats[0].magic, kTokenFormats[1].magic, kBinIsTokens));
  if (header[1] != format->version)
    throw std::runtime_error(fmt::format(
        "{}: token file version {} is not supported; accepted: version 1 (magic 20240520, "
        "uint16 tokens) and version 7 (magic 20240801, uint32 tokens)",
        f.path, header[1]));
  const int64_t ntokens = header[2], payload = f.size - kTokensHeaderBytes;
  if (ntokens < 0 || ntokens * format->bytes != payload)
    throw std::runtime_error(fmt::format(
        "{}: header says {} tokens ({} bytes) but {} bytes follow the {}-byte header ({})", f.path,
        ntokens, ntokens * format->bytes, payload, kTokensHeaderBytes,
        payload < ntokens * format->bytes ? "truncated?" : "more than the header counts"));
  return *format;
}

void open_files(dataloader& d) {
  const data_config& c = d.config;
  const std::vector<std::string> paths = expand(c);
  if (c.kind == data_kind::text) {
    if (c.vocab < kByteVocab)
      throw std::runtime_error(
          fmt::format("{}: text data is byte-level and needs vocab >= 256, but vocab is {}",
                      paths[0], c.vocab));
    if (c.vocab > kByteVocab && !c.allow_bytes)
      throw std::runtime_error(fmt::format(
          "{}: text is read as bytes, token ids 0 to 255, but this model's vocabulary has {} "
          "tokens: it would train on raw bytes, not its tokenizer's tokens; tokenize the text "
          "with the model's tokenizer into llm.c token files and pass those (.bin, "
          "docs/data.md#token-files), or pass --allow-bytes to train on bytes anyway",
          paths[0], with_commas(c.vocab)));
    if (paths.size() != 1)
      throw std::runtime_error(fmt::format("{}: text data is one file, but {} files are named",
                                           c.paths[0], paths.size()));
  }
  d.header_bytes = c.kind == data_kind::tokens ? kTokensHeaderBytes : 0;
  const token_format* first = nullptr;
  d.starts.assign(1, 0);
  for (const std::string& path : paths) {
    mapped_file f = map_file(path, c.shuffle ? MADV_RANDOM : MADV_SEQUENTIAL);
    if (c.kind == data_kind::tokens) {
      const token_format& t = check_token_header(f);
      if (!first) first = &t;
      if (&t != first)
        throw std::runtime_error(
            fmt::format("{}: holds {} tokens but {} holds {}: a set is one format", f.path, t.name,
                        d.files.front().path, first->name));
      d.token_bytes = t.bytes;
    }
    d.starts.push_back(d.starts.back() + (f.size - d.header_bytes) / d.token_bytes);
    d.files.push_back(std::move(f));
  }
}

// Token i of the stream from file k (which holds it).
int64_t stream_token(const dataloader& d, size_t k, int64_t i) {
  const std::byte* at = d.files[k].bytes + d.header_bytes + (i - d.starts[k]) * d.token_bytes;
  switch (d.token_bytes) {
    case 1:
      return static_cast<int64_t>(static_cast<unsigned char>(*at));
    case 2: {
      uint16_t v;
      std::memcpy(&v, at, 2);
      return v;
    }
    default: {
      uint32_t v;
      std::memcpy(&v, at, 4);
      return v;
    }
  }
}

// The file that holds token `i` of the stream.
size_t file_of(const dataloader& d, int64_t i) {
  return static_cast<size_t>(std::upper_bound(d.starts.begin(), d.starts.end(), i) -
                             d.starts.begin() - 1);
}

// The window a file source's global sequence j reads: perm_e(j mod W) of
// epoch e = j / W (dataloader_fill).
int64_t window_of(const dataloader& d, int64_t j) {
  const int64_t epoch = j / d.windows, position = j % d.windows;
  return d.config.shuffle ? data_shuffle(d.config.shuffle_seed, epoch, position, d.windows)
                          : position;
}

// Tokens [from, from + n) of the stream into out (as int32), checked < vocab;
// returns the file that holds token `from`.
size_t read_window(const dataloader& d, int64_t from, int64_t n, int64_t sequence, int32_t* out) {
  size_t k = file_of(d, from);
  const size_t first_file = k;
  for (int64_t i = from; i < from + n; ++i) {
    while (i >= d.starts[k + 1])
      ++k;
    const int64_t v = stream_token(d, k, i);
    if (v >= d.config.vocab) {
      out[i - from] = 0;  // kernels never index beyond the vocabulary
      std::lock_guard<std::mutex> lock(d.error->mutex);
      if (d.error->first.empty())
        d.error->first =
            fmt::format("{}: token at byte offset {} is {}, not < vocab {} (in {} sequence {})",
                        d.files[k].path, d.header_bytes + (i - d.starts[k]) * d.token_bytes, v,
                        d.config.vocab, d.config.role, sequence);
      continue;
    }
    out[i - from] = static_cast<int32_t>(v);
  }
  return first_file;
}

// Records the first error of a fill (a bad token id, a failed trace write).
void record_error(const dataloader& d, fmt::string_view what) {
  std::lock_guard<std::mutex> lock(d.error->mutex);
  if (d.error->first.empty()) d.error->first.assign(what.data(), what.size());
}

// The --trace-data line of sequence j (row: its T tokens, then `last`), read
// from `offset` of file `file` (-1: the synthetic stream). No allocation:
// the line is formatted on the stack.
void trace_sequence(const dataloader& d, const data_trace& t, int64_t j, const int32_t* row,
                    int32_t last, int64_t offset, int64_t file) {
  const uint64_t hash = fnv1a_ids(&last, 1, fnv1a_ids(row, d.config.context));
  char line[4608];
  const auto head = fmt::format_to_n(line, sizeof line, "{} {} {} {} {} {:016x} {} ", t.pass,
                                     t.index, t.rank, t.micro, j, hash, offset);
  const size_t used = std::min(head.size, sizeof line);
  const auto end = file < 0 ? fmt::format_to_n(head.out, sizeof line - used, "synthetic(seed={})\n",
                                               d.config.seed)
                            : fmt::format_to_n(head.out, sizeof line - used, "{}\n",
                                               d.files[static_cast<size_t>(file)].path);
  const size_t n = used + end.size;
  if (n > sizeof line || ::write(t.fd, line, n) != static_cast<ssize_t>(n))
    record_error(d, n > sizeof line ? "--trace-data: a line is longer than 4608 bytes"
                                    : "--trace-data: cannot append a line to the file");
}

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

int64_t data_shuffle(uint64_t seed, int64_t epoch, int64_t position, int64_t n) {
  if (n <= 1) return 0;
  // A balanced Feistel network over [0, 4^h) >= n, its round keys drawn
  // from (seed, epoch); positions it maps outside [0, n) are mapped again
  // (cycle walking), which keeps it a permutation of [0, n) and takes fewer
  // than 4 rounds of walking on average.
  int half = 1;
  while ((uint64_t{1} << (2 * half)) < static_cast<uint64_t>(n))
    ++half;
  const uint64_t mask = (uint64_t{1} << half) - 1;
  uint64_t keys[4];
  uint64_t k = mix64(seed ^ 0x5EEDDA7A5EEDull) ^ mix64(static_cast<uint64_t>(epoch) + 1);
  for (uint64_t& key : keys)
    key = k = mix64(k + 0x9E3779B97F4A7C15ull);
  uint64_t x = static_cast<uint64_t>(position);
  do {
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t key : keys) {
      const uint64_t next = left ^ (mix64(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

dataloader dataloader_open(const data_config& config) {
  const std::string what = config.kind == data_kind::synthetic ? "synthetic data"
                           : config.paths.empty()              ? config.role
                                                               : config.paths[0];
  if (config.context < 1)
    throw std::runtime_error(fmt::format("{}: context must be >= 1, got {}", what, config.context));
  if (config.vocab < 2 || config.vocab > INT32_MAX)
    throw std::runtime_error(
        fmt::format("{}: vocab must be in [2, {}], got {}", what, INT32_MAX, config.vocab));
  dataloader d;
  d.config = config;
  if (config.kind == data_kind::synthetic) {
    open_synthetic(d);
    return d;
  }
  open_files(d);
  if (config.kind == data_kind::tokens) {  // a set `fsdpgen prepare` wrote: against its manifest
    std::vector<token_file> files;
    for (size_t k = 0; k < d.files.size(); ++k)
      files.push_back({d.files[k].path, d.starts[k + 1] - d.starts[k]});
    token_manifest_check(files, d.token_bytes, config.vocab);
  }
  const int64_t n = d.starts.back(), T = config.context;
  if (n < T + 1)
    throw std::runtime_error(fmt::format(
        "{}: {} {}, fewer than context + 1 = {} needed for one sequence",
        d.files.size() == 1 ? d.files[0].path : fmt::format("{} ({} files)", what, d.files.size()),
        n, config.kind == data_kind::text ? "bytes" : "tokens", T + 1));
  d.windows = (n - 1) / T;
  return d;
}

void dataloader_fill(const dataloader& d, int64_t first_sequence, int64_t count, int32_t* tokens,
                     int32_t* targets, const data_trace* trace) {
  if (first_sequence < 0 || count < 0)
    throw std::runtime_error(fmt::format("dataloader_fill: bad sequence range first {} count {}",
                                         first_sequence, count));
  const int64_t T = d.config.context;
  for (int64_t i = 0; i < count; i++) {
    const int64_t j = first_sequence + i;
    int32_t* tok = tokens + i * T;
    int32_t* tgt = targets + i * T;
    if (d.config.kind == data_kind::synthetic) {
      fill_synthetic(d, j, tok, tgt + T - 1);
      std::copy(tok + 1, tok + T, tgt);
      if (trace) trace_sequence(d, *trace, j, tok, tgt[T - 1], j, -1);
      continue;
    }
    const int64_t w = window_of(d, j);
    const size_t file = read_window(d, w * T, T, j, tok);
    read_window(d, w * T + T, 1, j, tgt + T - 1);
    std::copy(tok + 1, tok + T, tgt);
    if (trace)
      trace_sequence(d, *trace, j, tok, tgt[T - 1], w * T - d.starts[file],
                     static_cast<int64_t>(file));
  }
}

std::string dataloader_locate(const dataloader& d, int64_t j) {
  if (d.config.kind == data_kind::synthetic)
    return fmt::format("synthetic(seed={}) sequence {}", d.config.seed, j);
  const int64_t from = window_of(d, j) * d.config.context;
  const size_t k = file_of(d, from);
  return fmt::format("{} byte offset {}", d.files[k].path,
                     d.header_bytes + (from - d.starts[k]) * d.token_bytes);
}

int64_t dataloader_sequences(const dataloader& d) {
  return d.windows;
}

int64_t dataloader_epoch(const dataloader& d, int64_t sequence) {
  return d.windows > 0 && sequence >= 0 ? sequence / d.windows : 0;
}

void dataloader_set_shuffle_seed(dataloader& d, uint64_t seed) {
  d.config.shuffle_seed = seed;
}

std::string dataloader_take_error(const dataloader& d) {
  std::lock_guard<std::mutex> lock(d.error->mutex);
  return std::exchange(d.error->first, std::string());
}

std::string dataloader_describe(const dataloader& d) {
  const data_config& c = d.config;
  if (c.kind == data_kind::synthetic) return fmt::format("synthetic(seed={})", c.seed);
  std::string names;
  for (const std::string& p : c.paths)
    names += (names.empty() ? "" : ", ") + p;
  const std::string files =
      d.files.size() == 1
          ? ""
          : fmt::format("{} files, ", with_commas(static_cast<int64_t>(d.files.size())));
  const char* order = c.shuffle ? "shuffled" : "in order";
  if (c.kind == data_kind::text)
    return fmt::format("text {}: {}{} bytes, {} sequences of {}, {}", names, files,
                       with_commas(d.starts.back()), with_commas(d.windows), c.context, order);
  return fmt::format("tokens {}: {}{} tokens ({}), {} sequences of {}, {}", names, files,
                     with_commas(d.starts.back()), d.token_bytes == 2 ? "uint16" : "uint32",
                     with_commas(d.windows), c.context, order);
}
