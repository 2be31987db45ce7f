// CheckContext: what every step of checking shares: the bounds values are
// read within, Keys (where each key was written, which later checks report
// at) and the context each step reads and writes (the Spec being filled).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "dsl/Diagnostics.h"
#include "dsl/Spec.h"

namespace fsdpgen {

// Bounds that keep every size computation far from int64 overflow.
constexpr int64_t kMaxVocab = int64_t{1} << 24;
constexpr int64_t kMaxPadVocabTo = 4096;  // more only wastes memory
constexpr int64_t kMaxContext = int64_t{1} << 22;
constexpr int64_t kMaxWidth = int64_t{1} << 17;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxFfn = int64_t{1} << 20;
constexpr int64_t kMaxWorld = int64_t{1} << 20;
constexpr int64_t kMaxMicroBatch = int64_t{1} << 20;
constexpr int64_t kMaxCount = int64_t{1} << 40;

// Where each dotted key ("parallel.world") was written, and which were rejected.
struct Keys {
  std::map<std::string, Span> value_at;  // where its value was written (or its flag)
  std::map<std::string, Span> entry_at;  // its whole `key = value`
  std::set<std::string> rejected;        // its value was reported and not used

  bool has(const std::string& key) const { return value_at.count(key) > 0; }
  Span where(const std::string& key, Span fallback = {}) const;
  // The whole entry when there is one, else where().
  Span entry(const std::string& key) const;
  bool from_command_line(const std::string& key) const { return where(key).command_line != 0; }
  // True when none of `keys` was given a value that was rejected: rules that
  // relate several keys skip themselves rather than report against a default.
  bool usable(std::initializer_list<std::string_view> keys) const;
  // True when a key under `prefix` ("model.") was rejected.
  bool rejected_under(std::string_view prefix) const;
};

// What each step of checking reads and writes.
struct CheckContext {
  explicit CheckContext(Diagnostics& d) : diags(d), after_syntax_errors(d.has_errors()) {}

  Diagnostics& diags;
  // After a syntax error some entries are missing from the AST; they are not
  // reported as missing a second time.
  bool after_syntax_errors;
  Spec spec;
  Keys keys;
  std::string spec_dir;  // where a relative path in the spec starts
};

}  // namespace fsdpgen
