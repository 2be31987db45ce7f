// libFuzzer target for the data files: the input as an llm.c token file (one
// file, and two copies as a set, in order and shuffled) and as a text file
// (dataloader_open, dataloader_fill). A bad file must be a std::runtime_error;
// one that opens must have (N - 1) / T windows of its N tokens, fill rows of
// tokens < vocab whose targets are the next tokens, and shuffle each epoch
// into a permutation, else we abort.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/train/data.h"
#include "tests/fuzz/Fuzz.h"

namespace {

using fuzz::check;

constexpr int64_t kMaxFilled = 64;         // sequences filled per source
constexpr int64_t kMaxPermuted = 1 << 12;  // windows whose shuffle is checked whole

void check_loader(const dataloader& d, int64_t header_bytes) {
  const data_config& c = d.config;
  int64_t n = 0;
  for (const mapped_file& f : d.files)
    n += (f.size - header_bytes) / d.token_bytes;
  check(d.starts.size() == d.files.size() + 1 && d.starts.back() == n, "starts count the tokens");
  const int64_t windows = dataloader_sequences(d);
  check(windows == (n - 1) / c.context && windows >= 1, "W = (N - 1) / T");

  // The last sequences of the first epoch and the first of the second.
  const int64_t first = std::max<int64_t>(0, windows - kMaxFilled / 2);
  const int64_t count = std::min(kMaxFilled, windows + 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count * c.context));
  std::vector<int32_t> targets(tokens.size());
  dataloader_fill(d, first, count, tokens.data(), targets.data());
  for (int64_t i = 0; i < count; ++i)
    for (int64_t t = 0; t < c.context; ++t) {
      const size_t at = static_cast<size_t>(i * c.context + t);
      check(tokens[at] >= 0 && tokens[at] < c.vocab, "a token is < vocab");
      check(targets[at] >= 0 && targets[at] < c.vocab, "a target is < vocab");
      if (t + 1 < c.context) check(targets[at] == tokens[at + 1], "targets are the next tokens");
    }
  dataloader_take_error(d);
  dataloader_describe(d);

  if (c.shuffle && windows <= kMaxPermuted) {
    std::vector<char> seen(static_cast<size_t>(windows), 0);
    for (int64_t p = 0; p < windows; ++p) {
      const int64_t w = data_shuffle(c.shuffle_seed, 1, p, windows);
      check(w >= 0 && w < windows && !seen[static_cast<size_t>(w)], "a shuffle is a permutation");
      seen[static_cast<size_t>(w)] = 1;
    }
  }
}

void try_open(const data_config& c, int64_t header_bytes) {
  dataloader d;
  try {
    d = dataloader_open(c);
  } catch (const std::runtime_error&) {
    return;
  }
  check_loader(d, header_bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string a = fuzz::write_file("a.bin", data, size);
  const std::string b = fuzz::write_file("b.bin", data, size);
  const std::string text = fuzz::write_file("a.txt", data, size);
  data_config c;
  c.kind = data_kind::tokens;
  c.context = 1 + static_cast<int64_t>(size % 5);
  c.vocab = size % 2 ? 300 : 128256;  // odd sizes meet tokens >= vocab
  c.shuffle_seed = size;
  for (const bool shuffle : {false, true}) {
    c.shuffle = shuffle;
    c.paths = {a};
    try_open(c, 1024);
    c.paths = {a, b};
    try_open(c, 1024);
  }
  c.kind = data_kind::text;
  c.paths = {text};
  c.vocab = 256;
  try_open(c, 0);
  return 0;
}
