// A spec file held in memory, and Span: a byte range in it. Line and column
// numbers are computed on demand from a line-start index (1-based, columns
// count bytes, as Clang does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fsdpgen {

// Half-open byte range [begin, end) in one SourceFile, or a value given on
// the command line (see Diagnostics::command_line), which has no place in it.
struct Span {
  uint32_t begin = 0;
  uint32_t end = 0;
  uint32_t command_line = 0;  // 0: in the file; k: the k-th command-line value

  static Span join(Span a, Span b) {
    return {a.begin < b.begin ? a.begin : b.begin, a.end > b.end ? a.end : b.end};
  }
  bool operator==(const Span&) const = default;
};

struct LineCol {
  uint32_t line = 1;    // 1-based
  uint32_t column = 1;  // 1-based, in bytes
};

class SourceFile {
 public:
  SourceFile(std::string name, std::string text);

  const std::string& name() const { return name_; }
  std::string_view text() const { return text_; }
  std::string_view slice(Span s) const;
  LineCol line_col(uint32_t offset) const;
  // The text of a 1-based line, without its newline.
  std::string_view line_text(uint32_t line) const;

 private:
  std::string name_;
  std::string text_;
  std::vector<uint32_t> line_starts_;  // offset of the first byte of each line
};

// Spec and header sources are a few kilobytes; this bounds what is read
// whole (and keeps offsets within SourceFile's 32 bits).
inline constexpr int64_t kSourceFileMaxBytes = int64_t{16} << 20;

// Reads a whole regular file of at most kSourceFileMaxBytes; returns false
// (and leaves `out` empty) if it cannot, with `error` saying why: a FIFO,
// a device such as /dev/zero or a directory is refused before any read
// could wait or never end.
bool read_file(const std::string& path, std::string& out, std::string& error);

}  // namespace fsdpgen
