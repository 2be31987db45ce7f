// eval_file: reading and checking llm.c's multiple-choice evaluation file.
#include "runtime/files/eval_file.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "runtime/files/file_io.h"

namespace {

// The fields after the header, one at a time, each read located.
class field_reader {
 public:
  field_reader(const std::string& path, const std::string& bytes, int width)
      : path_(path), bytes_(bytes), width_(width), at_(kEvalFileHeaderBytes) {}

  int64_t at() const { return at_; }
  bool done() const { return at_ >= static_cast<int64_t>(bytes_.size()); }

  // The next field; `what` names it where the file ends first.
  int64_t next(int64_t example, const std::string& what) {
    if (at_ + width_ > static_cast<int64_t>(bytes_.size()))
      throw std::runtime_error(
          fmt::format("{}: example {}: truncated: the file ends at byte {}, inside {}", path_,
                      example, bytes_.size(), what));
    int64_t v = 0;
    if (width_ == 2) {
      uint16_t x;
      std::memcpy(&x, bytes_.data() + at_, 2);
      v = x;
    } else {
      uint32_t x;
      std::memcpy(&x, bytes_.data() + at_, 4);
      v = x;
    }
    at_ += width_;
    return v;
  }

  // `count` tokens, each below vocab.
  std::vector<int32_t> tokens(int64_t example, int64_t count, int64_t vocab,
                              const std::string& what) {
    std::vector<int32_t> out(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t at = at_;
      const int64_t t = next(example, what);
      if (t >= vocab)
        throw std::runtime_error(fmt::format(
            "{}: example {}: {}: token {} at byte {} is not below the model's vocabulary of {}",
            path_, example, what, t, at, vocab));
      out[static_cast<size_t>(i)] = static_cast<int32_t>(t);
    }
    return out;
  }

 private:
  const std::string& path_;
  const std::string& bytes_;
  const int width_;
  int64_t at_;
};

}  // namespace

eval_file eval_file_read(const std::string& path, int64_t vocab, int64_t context) {
  const std::string bytes = file_read_whole(path, kEvalFileMaxBytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < kEvalFileHeaderBytes)
    throw std::runtime_error(
        fmt::format("{}: {} bytes, shorter than the {}-byte header of an evaluation file", path,
                    size, kEvalFileHeaderBytes));
  int32_t header[4];
  std::memcpy(header, bytes.data(), sizeof header);
  if (header[0] != kEvalFileMagic)
    throw std::runtime_error(fmt::format(
        "{}: not an evaluation file: magic {} at byte 0, expected {} (llm.c's write_evalfile, "
        "`fsdpgen prepare-eval`; a token file of 20240520 or 20240801 is training data: --data, "
        "--val)",
        path, header[0], kEvalFileMagic));
  if (header[1] != 1 && header[1] != 2)
    throw std::runtime_error(fmt::format(
        "{}: evaluation file version {} at byte 4; known: 1 (uint16 fields, llm.c's) and 2 "
        "(uint32 fields)",
        path, header[1]));
  const int64_t count = header[2], longest = header[3];
  if (count <= 0)
    throw std::runtime_error(
        fmt::format("{}: the header's example count (byte 8) is {}: no example", path, count));
  eval_file f;
  f.path = path;
  f.version = header[1];
  const int width = f.version == 1 ? 2 : 4;
  const int64_t delimiter = f.version == 1 ? 0xFFFF : 0xFFFFFFFFLL;
  field_reader r(path, bytes, width);
  f.examples.reserve(static_cast<size_t>(count));
  for (int64_t e = 0; e < count; ++e) {
    if (r.done())
      throw std::runtime_error(fmt::format(
          "{}: truncated: the header says {} examples, the file ends after {} (at byte {})", path,
          count, e, size));
    const int64_t start = r.at();
    auto fail = [&](const std::string& why) {
      return std::runtime_error(
          fmt::format("{}: example {} (at byte {}): {}", path, e, start, why));
    };
    if (const int64_t d = r.next(e, "its delimiter"); d != delimiter)
      throw fail(
          fmt::format("expected the example delimiter {}, found {}: not the start of an "
                      "example (a wrong byte count before it, or not an evaluation file)",
                      delimiter, d));
    const int64_t example_bytes = r.next(e, "its byte count");
    if (const int64_t index = r.next(e, "its index"); index != e)
      throw fail(
          fmt::format("its index field says {}; examples are numbered in file order", index));
    eval_example x;
    x.label = r.next(e, "its label");
    const int64_t completions = r.next(e, "its completion count");
    if (completions < 1) throw fail("it has no completion");
    if (x.label >= completions)
      throw fail(
          fmt::format("label {} is out of range for its {} completions", x.label, completions));
    const int64_t context_tokens = r.next(e, "its context's token count");
    if (context_tokens < 1) throw fail("its context is empty");
    x.context = r.tokens(e, context_tokens, vocab, "its context");
    for (int64_t j = 0; j < completions; ++j) {
      const std::string what = fmt::format("completion {}", j);
      const int64_t n = r.next(e, what + "'s token count");
      if (n < 1) throw fail(what + " is empty");
      if (context_tokens + n > context)
        throw fail(fmt::format(
            "its context ({} tokens) and {} ({} tokens) make {} tokens, longer than the model's "
            "context of {}",
            context_tokens, what, n, context_tokens + n, context));
      x.completions.push_back(r.tokens(e, n, vocab, what));
    }
    const int64_t taken = r.at() - start;
    if (example_bytes != taken)
      throw fail(
          fmt::format("its byte count says {} but its fields take {}", example_bytes, taken));
    if (taken > longest)
      throw fail(fmt::format("it takes {} bytes, more than the header's longest example ({})",
                             taken, longest));
    f.examples.push_back(std::move(x));
  }
  if (!r.done())
    throw std::runtime_error(
        fmt::format("{}: {} bytes after the last of the header's {} examples "
                    "(from byte {})",
                    path, size - r.at(), count, r.at()));
  return f;
}
