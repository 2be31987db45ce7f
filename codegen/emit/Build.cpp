// Build: the compiler command and its execution.
#include "codegen/emit/Build.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "codegen/emit/BuildConfig.h"
#include "runtime/files/file_io.h"

extern char** environ;

namespace fsdpgen {
namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

}  // namespace

std::string unwritable_output_reason(const std::string& output) {
  const file_write_problem p = file_write_check(output);
  const std::string dir = "'" + p.dir + "'";
  switch (p.what) {
    case file_write_problem::none:
      return "";
    case file_write_problem::is_directory:
      return "it is a directory";
    case file_write_problem::no_directory:
      return dir + " does not exist";
    case file_write_problem::not_a_directory:
      return dir + " is not a directory";
    case file_write_problem::cannot_create:
      return "cannot create files in " + dir + ": " + p.error;
    case file_write_problem::cannot_open:  // the linker opens an existing output in place
      return p.error;
  }
  return "";
}

namespace {

// Runs argv; fills r.command, r.ok and adds to r.seconds.
void run_command(std::vector<std::string> args, BuildResult& r) {
  r.command.clear();
  for (const std::string& a : args)
    r.command += (r.command.empty() ? "" : " ") + a;
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  auto start = std::chrono::steady_clock::now();
  pid_t pid;
  r.ok = false;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return;
  int status = 0;
  waitpid(pid, &status, 0);
  r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

BuildResult build_program(const std::string& source_path, const std::string& output, bool cuda,
                          const std::vector<std::string>& include_dirs,
                          const std::vector<std::string>& cuda_sources,
                          const std::vector<std::string>& extra_flags) {
  BuildResult r;
  std::vector<std::string> objects;
  if (cuda)
    for (const std::string& src : cuda_sources) {
      const std::filesystem::path object = std::filesystem::path(source_path).parent_path() /
                                           (std::filesystem::path(src).stem().string() + ".o");
      std::vector<std::string> args = {kBuildNvcc};
      for (const std::string& f : split(kBuildNvccFlags))
        args.push_back(f);
      for (const std::string& d : include_dirs)
        args.push_back("-I" + d);
      args.insert(args.end(), {"-c", src, "-o", object.string()});
      run_command(std::move(args), r);
      if (!r.ok) return r;
      objects.push_back(object.string());
    }
  const char* cxx = std::getenv("FSDPGEN_CXX");
  std::vector<std::string> args = {cxx && *cxx ? cxx : kBuildCompiler};
  for (const std::string& d : include_dirs)
    args.push_back("-I" + d);
  for (const std::string& f : split(kBuildCompileFlags))
    args.push_back(f);
  if (cuda)
    for (const std::string& f : split(kBuildCudaCompileFlags))
      args.push_back(f);
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  args.push_back(source_path);
  args.insert(args.end(), objects.begin(), objects.end());
  args.push_back("-o");
  args.push_back(output);
  // The CUDA runtime library first: it calls into the CPU runtime's.
  if (cuda)
    for (const std::string& f : split(kBuildCudaLibraries))
      args.push_back(f);
  for (const std::string& f : split(kBuildLinkFlags))
    args.push_back(f);
  if (cuda)
    for (const std::string& f : split(kBuildCudaSystemLibraries))
      args.push_back(f);
  run_command(std::move(args), r);
  return r;
}

}  // namespace fsdpgen
