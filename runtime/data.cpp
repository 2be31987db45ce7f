// data: synthetic token streams, byte-level text and llm.c .bin token files
// (validated at open), filled into (B, T) token and target rows.
#include "runtime/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/human.h"

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

// Closes a descriptor on every path out of a function.
struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

std::vector<unsigned char> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(fmt::format("{}: cannot open: {}", path, strerror(errno)));
  const fd_guard guard{fd};
  struct stat st;
  if (fstat(fd, &st) != 0)
    throw std::runtime_error(fmt::format("{}: cannot stat: {}", path, strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(fmt::format("{}: not a regular file", path));
  std::vector<unsigned char> bytes(static_cast<size_t>(st.st_size));
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(fmt::format("{}: read failed at byte {} of {}: {}", path, done,
                                           bytes.size(),
                                           n == 0 ? "unexpected end of file" : strerror(errno)));
    done += static_cast<size_t>(n);
  }
  return bytes;
}

void open_text(dataloader& d) {
  const data_config& c = d.config;
  if (c.vocab < 256)
    throw std::runtime_error(
        fmt::format("{}: text data is byte-level and needs vocab >= 256, but vocab is {}",
                    c.paths[0], c.vocab));
  std::vector<unsigned char> bytes = read_file(c.paths[0]);
  d.file_bytes = static_cast<int64_t>(bytes.size());
  d.stream.assign(bytes.begin(), bytes.end());
}

// llm.c's token file: 256 int32 (magic, version, token count, unused), then
// the tokens as uint16, all little-endian.
constexpr int32_t kTokensMagic = 20240520;
constexpr int32_t kTokensVersion = 1;
constexpr int64_t kTokensHeaderBytes = 1024;  // 256 int32
static_assert(std::endian::native == std::endian::little, "token files are read in place");

// Why a .bin file may not be tokens at all, and what to do about it.
constexpr const char* kBinIsTokens =
    "a .bin file is read as an llm.c token file; to train on a text file, give it another "
    "extension (e.g. --data input.txt)";

void open_tokens(dataloader& d) {
  const data_config& c = d.config;
  std::vector<unsigned char> bytes = read_file(c.paths[0]);
  d.file_bytes = static_cast<int64_t>(bytes.size());
  if (d.file_bytes < kTokensHeaderBytes)
    throw std::runtime_error(
        fmt::format("{}: file is {} bytes, shorter than the {}-byte header of an llm.c token "
                    "file ({})",
                    c.paths[0], d.file_bytes, kTokensHeaderBytes, kBinIsTokens));
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof header);
  if (header[0] != kTokensMagic)
    throw std::runtime_error(fmt::format("{}: magic number is {}, expected {} ({})", c.paths[0],
                                         header[0], kTokensMagic, kBinIsTokens));
  if (header[1] != kTokensVersion)
    throw std::runtime_error(fmt::format(
        "{}: token file version {} is not supported; accepted: version {} (uint16 tokens)",
        c.paths[0], header[1], kTokensVersion));
  const int64_t ntokens = header[2], payload = d.file_bytes - kTokensHeaderBytes;
  if (ntokens < 0 || ntokens * 2 != payload)
    throw std::runtime_error(
        fmt::format("{}: header says {} tokens ({} bytes) but {} bytes follow the {}-byte header",
                    c.paths[0], ntokens, ntokens * 2, payload, kTokensHeaderBytes));
  d.stream.resize(static_cast<size_t>(ntokens));
  std::memcpy(d.stream.data(), bytes.data() + kTokensHeaderBytes, static_cast<size_t>(payload));
  for (int64_t i = 0; i < ntokens; i++)
    if (d.stream[i] >= c.vocab)
      throw std::runtime_error(fmt::format("{}: token {} (byte offset {}) is {}, not < vocab {}",
                                           c.paths[0], i, kTokensHeaderBytes + 2 * i, d.stream[i],
                                           c.vocab));
}

}  // namespace

dataloader dataloader_open(const data_config& config) {
  const char* what =
      config.kind == data_kind::synthetic ? "synthetic data" : config.paths[0].c_str();
  if (config.context < 1)
    throw std::runtime_error(fmt::format("{}: context must be >= 1, got {}", what, config.context));
  if (config.vocab < 2 || config.vocab > INT32_MAX)
    throw std::runtime_error(
        fmt::format("{}: vocab must be in [2, {}], got {}", what, INT32_MAX, config.vocab));
  dataloader d;
  d.config = config;
  switch (config.kind) {
    case data_kind::synthetic:
      open_synthetic(d);
      return d;
    case data_kind::text:
      open_text(d);
      break;
    case data_kind::tokens:
      open_tokens(d);
      break;
  }
  const int64_t n = static_cast<int64_t>(d.stream.size()), T = config.context;
  if (n < T + 1)
    throw std::runtime_error(fmt::format(
        "{}: {} {}, fewer than context + 1 = {} needed for one sequence", config.paths[0], n,
        config.kind == data_kind::text ? "bytes" : "tokens", T + 1));
  d.windows = (n - 1) / T;
  return d;
}

void dataloader_fill(const dataloader& d, int64_t first_sequence, int64_t count, int32_t* tokens,
                     int32_t* targets) {
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
    } else {
      const uint16_t* window = d.stream.data() + (j % d.windows) * T;
      std::copy(window, window + T, tok);
      std::copy(window + 1, window + T + 1, tgt);
    }
  }
}

std::string dataloader_describe(const dataloader& d) {
  const data_config& c = d.config;
  switch (c.kind) {
    case data_kind::synthetic:
      return fmt::format("synthetic(seed={})", c.seed);
    case data_kind::text:
      return fmt::format("text {}: {} bytes, {} sequences of {}", c.paths[0],
                         with_commas(d.file_bytes), with_commas(d.windows), c.context);
    case data_kind::tokens:
      return fmt::format("tokens {}: {} tokens, {} sequences of {}", c.paths[0],
                         with_commas(static_cast<int64_t>(d.stream.size())), with_commas(d.windows),
                         c.context);
  }
  return "";
}

int64_t dataloader_sequences(const dataloader& d) {
  return d.windows;
}
int64_t dataloader_epoch(const dataloader& d, int64_t j) {
  return d.windows ? j / d.windows : 0;
}
void dataloader_set_shuffle_seed(dataloader& d, uint64_t seed) {
  d.config.shuffle_seed = seed;
}
std::string dataloader_take_error(const dataloader&) {
  return "";
}
