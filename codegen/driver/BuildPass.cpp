// BuildPass: build_program as a pass: where the source goes, which flags,
// whose fault a failed compile is.
#include "codegen/driver/BuildPass.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "codegen/driver/Output.h"
#include "codegen/emit/Build.h"

namespace fsdpgen {
namespace {

// The directory the source is compiled from: --sources, else a fresh
// temporary one; empty after printing why.
std::optional<std::filesystem::path> sources_dir_for(const std::string& sources_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!sources_dir.empty()) {
    fs::create_directories(sources_dir, ec);
    return fs::path(sources_dir);
  }
  // The error_code form: a TMPDIR that names no directory is the user's to fix, not a crash.
  std::string pattern = (fs::temp_directory_path(ec) / "fsdpgen-XXXXXX").string();
  if (ec || !mkdtemp(pattern.data())) {
    print_stderr(fmt::format(
        "fsdpgen: error: cannot create a temporary directory: {} (TMPDIR, else /tmp, must be a "
        "writable directory; or keep the source with --sources DIR)\n",
        ec ? ec.message() : std::strerror(errno)));
    return std::nullopt;
  }
  return fs::path(pattern);
}

}  // namespace

Failure build_pass(const std::string& spec_path, const PipelineOptions& o, const ModelSpec& model,
                   const std::string& source, std::string& report) {
  auto dir = sources_dir_for(o.sources_dir);
  if (!dir) return Failure::User;
  const std::string src = (*dir / "train.cpp").string();
  if (!write_output(src, source)) return Failure::User;
  const bool cuda = o.emit.kind == EmitTarget::Kind::Cuda;
  const std::vector<std::string>& headers = model.layer_headers;
  std::vector<std::string> includes;
  for (const std::string& h : headers)
    includes.push_back(std::filesystem::absolute(h).parent_path().lexically_normal().string());
  // The runtime libraries carry DWARF (RelWithDebInfo), 55 MB of a 58 MB
  // binary: kept where the user is debugging (--check, --sources), dropped
  // otherwise (the symbols stay, for backtraces and perf).
  std::vector<std::string> flags;
  if (o.sanitize)
    flags = {"-fsanitize=address", "-fno-omit-frame-pointer", "-g"};
  else if (o.sources_dir.empty())
    flags = {"-Wl,--strip-debug"};
  BuildResult r = build_program(src, o.output, cuda, includes, model.layer_cuda_sources, flags);
  if (o.sources_dir.empty()) std::filesystem::remove_all(*dir);
  if (!r.ok && !headers.empty()) {  // the layers' code is the user's: so are its errors
    print_stderr(
        fmt::format("fsdpgen: error: compiling the generated program with the custom "
                    "layers of {} failed (the compiler's errors above):\n  {}\n"
                    "(run with --sources DIR to keep the source)\n",
                    fmt::join(headers, " and "), r.command));
    return Failure::User;
  }
  if (!r.ok) {
    print_stderr(
        fmt::format("fsdpgen: internal error: compiling the generated program failed:\n  {}\n"
                    "(run with --sources DIR to keep the source)\n",
                    r.command));
    return Failure::Internal;
  }
  report = fmt::format("fsdpgen: built {} from {} for {} in {:.1f} s\n", o.output, spec_path,
                       cuda ? "CUDA (" + o.emit.hardware + ")" : "CPU", r.seconds);
  return Failure::None;
}

}  // namespace fsdpgen
