// Helpers shared by the dsl tests: loading specs from strings and files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "dsl/Frontend.h"
#include "dsl/Source.h"

namespace fsdpgen::test {

inline std::filesystem::path source_dir() {
  return FSDPGEN_SOURCE_DIR;
}

// Files with extension `ext` in a directory of the source tree, sorted.
inline std::vector<std::filesystem::path> files_in(const std::string& dir, const std::string& ext) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(source_dir() / dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::string text, error;
  if (!read_file(p.string(), text, error)) ADD_FAILURE() << "cannot read " << p << ": " << error;
  return text;
}

// A minimal valid model section followed by `rest`.
inline std::string with_model(const std::string& rest, const std::string& model_extra = "") {
  return "model t { vocab = 256 context = 64 width = 64 heads = 4 layers = 4 " + model_extra +
         " }\n" + rest;
}

// Loads text that must be valid; fails the test with the diagnostics otherwise.
inline Spec load_ok(const std::string& text) {
  FrontendResult r = load_spec_text("test.fsdp", text);
  EXPECT_TRUE(r.spec.has_value()) << r.diagnostics;
  return r.spec ? *r.spec : Spec{};
}

// Loads text that must fail; returns the rendered diagnostics.
inline std::string load_error(const std::string& text) {
  FrontendResult r = load_spec_text("test.fsdp", text);
  EXPECT_FALSE(r.spec.has_value()) << "expected an error for:\n" << text;
  return r.diagnostics;
}

}  // namespace fsdpgen::test
