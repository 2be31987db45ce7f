// Output: writing a command's text, to a file or stdout, saying why not.
#pragma once

#include <string>

namespace fsdpgen {

// Writes `text` to `path`, or stdout when path is empty or "-"; false after
// printing why not on stderr.
bool write_output(const std::string& path, const std::string& text);

// Prints `text` (whole lines: diagnostics, notes) on stderr.
void print_stderr(const std::string& text);

}  // namespace fsdpgen
