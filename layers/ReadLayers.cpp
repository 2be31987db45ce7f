// ReadLayers: running the reader, with a timeout, and its cache; see ReadLayers.h.
#include "layers/ReadLayers.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

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

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

// How a run of the reader ended.
struct Ended {
  enum { exited, killed, not_started, timed_out } how = not_started;
  int code = 0;  // the exit status (exited) or the signal (killed)
  bool ok() const { return how == exited && code == 0; }
};

// Runs argv with stdout and stderr into `out_file`; killed past kReaderSeconds.
Ended run(std::vector<std::string> args, const std::string& out_file) {
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  const int err = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err != 0) return {};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kReaderSeconds);
  int status = 0;
  for (auto wait = std::chrono::milliseconds(1);; wait = std::min(wait * 2, decltype(wait)(50))) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return {};
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {Ended::timed_out};
    }
    std::this_thread::sleep_for(wait);
  }
  if (WIFSIGNALED(status)) return {Ended::killed, WTERMSIG(status)};
  return {Ended::exited, WEXITSTATUS(status)};
}

// What a reader run on `header` that did not answer said: what it printed,
// after a line saying how it ended where that line is news (a signal, a
// silent exit status).
std::string failure(const Ended& e, const std::string& said, const std::string& reader,
                    const std::string& header) {
  const bool silent = said.find_first_not_of(" \t\r\n") == std::string::npos;
  switch (e.how) {
    case Ended::not_started:
      return "cannot run the layer reader " + reader;
    case Ended::timed_out:
      return "the layer reader " + reader + " ran past " + std::to_string(kReaderSeconds) +
             " s reading " + header + " and was stopped";
    case Ended::killed: {
      const char* name = strsignal(e.code);
      return "the layer reader " + reader + " was killed by signal " + std::to_string(e.code) +
             " (" + (name ? name : "unknown") + ") reading " + header + (silent ? "" : "\n" + said);
    }
    case Ended::exited:
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
  const Ended v = run({reader, "--version"}, tmp.string());
  const std::string version = v.ok() ? slurp(tmp).value_or("") : "";
  if (!v.ok() || version.empty()) {
    fs::remove(tmp, ec);
    r.diagnostics = "cannot run the layer reader " + reader;
    return r;
  }
  char key[17];
  std::snprintf(key, sizeof key, "%016llx",
                static_cast<unsigned long long>(fnv1a(*bytes, fnv1a(version + "|" + header))));
  const fs::path cached =
      cache_dir.empty() ? fs::path() : fs::path(cache_dir) / (std::string(key) + ".json");
  std::string json;
  if (!cache_dir.empty()) {
    if (auto c = slurp(cached)) {
      json = *c;
      r.cached = true;
    }
  }
  if (json.empty()) {
    const fs::path out = tmp.string() + ".json";
    const Ended ended = run({reader, header, "-o", out.string()}, tmp.string());
    const std::string said = slurp(tmp).value_or("");
    fs::remove(tmp, ec);
    if (!ended.ok()) {
      fs::remove(out, ec);
      r.diagnostics = failure(ended, said, reader, header);
      return r;
    }
    json = slurp(out).value_or("");
    fs::remove(out, ec);
    if (!cache_dir.empty()) {  // written whole, then renamed: a reader never sees half of it
      fs::create_directories(cache_dir, ec);
      const fs::path part = cached.string() + ".part" + std::to_string(getpid());
      std::ofstream(part, std::ios::binary) << json;
      fs::rename(part, cached, ec);
      if (ec) fs::remove(part, ec);
    }
  }
  fs::remove(tmp, ec);
  std::string error;
  r.layers = parse_layer_json(json, &error);
  if (!r.layers) r.diagnostics = header + ": the layer reader's answer: " + error;
  return r;
}

}  // namespace fsdpgen::layers
