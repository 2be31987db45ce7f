// ReadLayers: fsdpgen's side of a layer header: it runs the reader
// (fsdpgen-layers) on the header, or reuses its answer cached under a hash of
// the header's bytes, the reader's version and its flags, and parses the
// JSON into LayerDecls. fsdpgen never links Clang (DESIGN §9).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dsl/layer_reader/LayerDecl.h"

namespace fsdpgen::layers {

struct ReadResult {
  std::optional<std::vector<LayerDecl>> layers;  // nullopt: see diagnostics
  // The reader's (Clang's format), or one line saying what failed: the reader
  // could not run, ran too long, was killed by a signal (its output, if any,
  // follows) or exited non-zero without a word.
  std::string diagnostics;
  bool cached = false;  // the answer came from the cache
};

// `reader`: the reader's path, "" where it was not built (the result then
// says how to install it). `cache_dir`: where answers are kept ("" for none).
ReadResult read_layers(const std::string& reader, const std::string& header,
                       const std::string& cache_dir);

// FSDPGEN_CACHE_DIR, else $XDG_CACHE_HOME/fsdpgen, else ~/.cache/fsdpgen; its
// "layers" folder.
std::string default_layer_cache_dir();

// The key the layer cache keeps an answer under: FNV-1a 64 of `bytes` (a
// header's) after `context` (what else the answer depends on), 16 hex digits.
std::string layer_cache_key(std::string_view bytes, std::string_view context);

// The layer cache's file `name` in `cache_dir`: read (nullopt when absent),
// and stored whole (written, then renamed: a reader never sees half of it;
// a failure to store is no error, the answer is only not kept).
std::optional<std::string> layer_cache_load(const std::string& cache_dir, const std::string& name);
void layer_cache_store(const std::string& cache_dir, const std::string& name,
                       const std::string& text);

// The one line for a spec that imports a header where no reader was built.
std::string reader_missing_message();

}  // namespace fsdpgen::layers
