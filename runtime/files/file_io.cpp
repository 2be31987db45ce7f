// file_io: pread/pwrite loops.
#include "runtime/files/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
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
