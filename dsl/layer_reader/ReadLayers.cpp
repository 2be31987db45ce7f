// ReadLayers: running the reader, with a timeout, and its cache; see ReadLayers.h.
#include "dsl/layer_reader/ReadLayers.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dsl/layer_reader/Subprocess.h"
#include "runtime/fnv1a.h"

namespace fsdpgen::layers {
namespace {

namespace fs = std::filesystem;

// The longest a reader run may take (it answers in well under a second).
constexpr int kReaderSeconds = 120;

std::optional<std::string> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a reader run on `header` that did not answer said: what it printed,
// after a line saying how it ended where that line is news (a signal, a
// silent exit status).
std::string failure(const ProcessEnd& e, const std::string& said, const std::string& reader,
                    const std::string& header) {
  const bool silent = said.find_first_not_of(" \t\r\n") == std::string::npos;
  switch (e.how) {
    case ProcessEnd::not_started:
      return "cannot run the layer reader " + reader;
    case ProcessEnd::timed_out:
      return "the layer reader " + reader + " ran past " + std::to_string(kReaderSeconds) +
             " s reading " + header + " and was stopped";
    case ProcessEnd::killed: {
      const char* name = strsignal(e.code);
      return "the layer reader " + reader + " was killed by signal " + std::to_string(e.code) +
             " (" + (name ? name : "unknown") + ") reading " + header + (silent ? "" : "\n" + said);
    }
    case ProcessEnd::exited:
      break;
  }
  if (!silent) return said;
  return "the layer reader " + reader + " exited with status " + std::to_string(e.code) +
         " reading " + header + " without a message";
}

}  // namespace

std::string reader_missing_message() {
  return "custom layers need fsdpgen-layers, which this build lacks (CMake found no Clang 19): "
         "install clang-19 libclang-19-dev libclang-cpp19-dev llvm-19-dev (tools/setup.sh deps) "
         "and configure again";
}

std::string layer_cache_key(std::string_view bytes, std::string_view context) {
  // FNV-1a over the context, then the bytes, from a seed of 1469598103934665603
  // (FNV's basis less a digit: kept, so that the caches already written stay valid).
  char key[17];
  std::snprintf(
      key, sizeof key, "%016llx",
      static_cast<unsigned long long>(fnv1a(bytes, fnv1a(context, 1469598103934665603ull))));
  return key;
}

std::optional<std::string> layer_cache_load(const std::string& cache_dir, const std::string& name) {
  if (cache_dir.empty()) return std::nullopt;
  return slurp(fs::path(cache_dir) / name);
}

void layer_cache_store(const std::string& cache_dir, const std::string& name,
                       const std::string& text) {
  if (cache_dir.empty()) return;
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  const fs::path kept = fs::path(cache_dir) / name;
  const fs::path part = kept.string() + ".part" + std::to_string(getpid());
  std::ofstream(part, std::ios::binary) << text;
  fs::rename(part, kept, ec);
  if (ec) fs::remove(part, ec);
}

std::string default_layer_cache_dir() {
  if (const char* d = std::getenv("FSDPGEN_CACHE_DIR"); d && *d) return fs::path(d) / "layers";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d)
    return fs::path(d) / "fsdpgen" / "layers";
  if (const char* d = std::getenv("HOME"); d && *d)
    return fs::path(d) / ".cache" / "fsdpgen" / "layers";
  return "";
}

ReadResult read_layers(const std::string& reader, const std::string& header,
                       const std::string& cache_dir) {
  ReadResult r;
  if (reader.empty()) {
    r.diagnostics = reader_missing_message();
    return r;
  }
  const auto bytes = slurp(header);
  if (!bytes || !fs::is_regular_file(header)) {
    r.diagnostics = header + ": cannot read the layer header";
    return r;
  }
  // The key: the header, the reader's version line and the flags it is run with.
  std::error_code ec;
  const fs::path tmp = fs::temp_directory_path(ec) / ("fsdpgen-layers-" + std::to_string(getpid()));
  const ProcessEnd v = run_to_file({reader, "--version"}, tmp.string(), kReaderSeconds);
  const std::string version = v.ok() ? slurp(tmp).value_or("") : "";
  if (!v.ok() || version.empty()) {
    fs::remove(tmp, ec);
    r.diagnostics = "cannot run the layer reader " + reader;
    return r;
  }
  const std::string cached = layer_cache_key(*bytes, version + "|" + header) + ".json";
  std::string json;
  if (auto c = layer_cache_load(cache_dir, cached)) {
    json = *c;
    r.cached = true;
  }
  if (json.empty()) {
    const fs::path out = tmp.string() + ".json";
    const ProcessEnd ended =
        run_to_file({reader, header, "-o", out.string()}, tmp.string(), kReaderSeconds);
    const std::string said = slurp(tmp).value_or("");
    fs::remove(tmp, ec);
    if (!ended.ok()) {
      fs::remove(out, ec);
      r.diagnostics = failure(ended, said, reader, header);
      return r;
    }
    json = slurp(out).value_or("");
    fs::remove(out, ec);
    layer_cache_store(cache_dir, cached, json);
  }
  fs::remove(tmp, ec);
  std::string error;
  r.layers = parse_layer_json(json, &error);
  if (!r.layers) r.diagnostics = header + ": the layer reader's answer: " + error;
  return r;
}

}  // namespace fsdpgen::layers
