// Diagnostics: errors, warnings and notes collected across all passes of the
// front end and rendered the way Clang renders them:
//   spec.fsdp:12:7: error: message
//     sharding = ful_shard
//                ^~~~~~~~~
//   spec.fsdp:3:1: note: ...
//   1 error generated.
// Errors about a command-line value name the flag instead of a place:
//   error: --world 2: ranks_per_node (8) must divide world (2)
//   spec.fsdp:19:3: note: the spec says world = 16 here
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dsl/Source.h"

namespace fsdpgen {

enum class Severity { Note, Warning, Error };

struct DiagNote {
  bool has_span = false;
  Span span;
  std::string message;
};

struct Diagnostic {
  Severity severity = Severity::Error;
  Span span;
  std::string message;
  std::vector<DiagNote> notes;
};

class Diagnostics {
 public:
  // Errors past this many are counted but not kept (Clang's -ferror-limit),
  // so the rendered output stays linear in the size of the input.
  static constexpr size_t kErrorLimit = 50;

  explicit Diagnostics(const SourceFile& file) : file_(&file) {}

  // Each returns the new diagnostic so the caller can attach notes; when the
  // error limit is reached it returns a scratch diagnostic that is dropped.
  Diagnostic& error(Span span, std::string message);
  Diagnostic& warning(Span span, std::string message);
  // A note of its own (what the compiler chose where the spec left it open):
  // rendered as `note:`, counted as neither error nor warning.
  Diagnostic& remark(Span span, std::string message);
  static void note(Diagnostic& d, Span span, std::string message);
  static void note(Diagnostic& d, std::string message);

  // A span for a value given on the command line as `flag` ("--world 2"):
  // diagnostics there are the flag's, each followed by `replaced` (where
  // the spec sets the value the flag replaces) when there is one.
  Span command_line(std::string flag, std::optional<DiagNote> replaced = std::nullopt);

  size_t error_count() const { return errors_; }
  size_t warning_count() const { return warnings_; }
  bool has_errors() const { return errors_ > 0; }
  const std::vector<Diagnostic>& all() const { return diags_; }
  const SourceFile& file() const { return *file_; }

  // All diagnostics sorted by position (stable), each with its source line
  // and caret, followed by "N errors generated." when there are any.
  std::string render() const;

 private:
  struct CommandLineValue {
    std::string flag;
    std::optional<DiagNote> replaced;
  };

  Diagnostic& add(Severity sev, Span span, std::string message);
  void render_at(Severity sev, Span span, const std::string& message, std::string& out) const;

  const SourceFile* file_;
  std::vector<CommandLineValue> command_line_;  // Span::command_line k is [k - 1]
  std::vector<Diagnostic> diags_;
  Diagnostic scratch_;
  size_t errors_ = 0;
  size_t warnings_ = 0;
};

}  // namespace fsdpgen
