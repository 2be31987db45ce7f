// file_io: pread/pwrite loops, and the output checks.
#include "runtime/files/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

int file_open_regular(const std::string& path, int64_t* size_bytes) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw std::runtime_error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISREG(st.st_mode) ? std::strerror(errno) : file_kind(st.st_mode);
    ::close(fd);
    throw std::runtime_error(fmt::format("{}: not a regular file ({})", path, why));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  if (size_bytes) *size_bytes = static_cast<int64_t>(st.st_size);
  return fd;
}

std::string file_read_whole(const std::string& path, int64_t max_bytes) {
  int64_t size = 0;
  const int fd = file_open_regular(path, &size);
  std::string text;
  try {
    if (size > max_bytes)
      throw std::runtime_error(fmt::format("{}: {} bytes, more than the {} bytes this reads whole",
                                           path, size, max_bytes));
    text.resize(static_cast<size_t>(size));
    file_pread_all(fd, path, text.data(), size, 0, "the file");
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return text;
}

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

std::string file_special_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return "";
  return file_kind(st.st_mode);
}

std::string file_output_overlap(const std::string& output, const std::vector<std::string>& inputs,
                                const std::string& input_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const std::string& input : inputs)
    if (fs::exists(output, ec) && fs::equivalent(output, input, ec))
      return fmt::format("{} is {}", output, input);
  if (input_dir.empty()) return "";
  const fs::path out = fs::weakly_canonical(fs::absolute(output, ec), ec);
  const fs::path dir = fs::weakly_canonical(fs::absolute(input_dir, ec), ec);
  if (out.empty() || dir.empty()) return "";
  // Inside: dir's components are the first of out's.
  auto o = out.begin();
  for (const fs::path& part : dir) {
    if (o == out.end() || *o != part) return "";
    ++o;
  }
  return fmt::format("{} is inside {}", output, input_dir);
}
