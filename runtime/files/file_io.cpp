// file_io: pread/pwrite loops, and the output check.
#include "runtime/files/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

void file_pread_all(int fd, const std::string& path, void* out, int64_t n, int64_t offset,
                    const std::string& what) {
  auto* p = static_cast<char*>(out);
  for (int64_t done = 0; done < n;) {
    const ssize_t got = ::pread(fd, p + done, static_cast<size_t>(n - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw std::runtime_error(fmt::format("{}: reading {} at byte {}: {}", path, what,
                                           offset + done, std::strerror(errno)));
    if (got == 0)
      throw std::runtime_error(
          fmt::format("{}: file ends at byte {} while reading {} (truncated, or changed since it "
                      "was opened?)",
                      path, offset + done, what));
    done += got;
  }
}

void file_pwrite_all(int fd, const std::string& path, const void* data, int64_t n, int64_t offset,
                     const std::string& what) {
  auto* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < n;) {
    const ssize_t put = ::pwrite(fd, p + done, static_cast<size_t>(n - done), offset + done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0)
      throw std::runtime_error(fmt::format("{}: writing {} at byte {}: {}", path, what,
                                           offset + done,
                                           put < 0 ? std::strerror(errno) : "no progress"));
    done += put;
  }
}

namespace {

// Makes and removes a file in dir: "" when that worked, else the system's reason.
std::string creation_error(const std::string& dir) {
  std::string probe = (std::filesystem::path(dir) / ".fsdpgen-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

file_write_problem file_write_check(const std::string& path) {
  namespace fs = std::filesystem;
  using problem = file_write_problem;
  std::error_code ec;
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (fs::is_directory(path, ec)) return {problem::is_directory, dir, ""};
  if (!fs::exists(dir, ec)) return {problem::no_directory, dir, ""};
  if (!fs::is_directory(dir, ec)) return {problem::not_a_directory, dir, ""};
  if (std::string why = creation_error(dir); !why.empty())
    return {problem::cannot_create, dir, why};
  if (fs::exists(path, ec) && ::access(path.c_str(), W_OK) != 0)
    return {problem::cannot_open, dir, std::strerror(errno)};
  return {problem::none, dir, ""};
}
