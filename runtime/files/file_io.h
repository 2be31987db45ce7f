// file_io: whole reads and writes at an offset (pread/pwrite until done,
// retrying interrupted calls) for the weights and checkpoint files. Errors
// throw std::runtime_error "PATH: reading WHAT at byte N: REASON". And
// whether an output file can be written, asked before any work is done.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

// Opens `path` for reading (O_RDONLY | O_CLOEXEC), refusing before any read
// could wait or never end whatever is not a regular file: a FIFO (opened
// without blocking, then refused), a device such as /dev/zero, a directory.
// Throws std::runtime_error "PATH: cannot open: REASON" or "PATH: not a
// regular file (a FIFO)". Sets *size_bytes to the file's size when given.
int file_open_regular(const std::string& path, int64_t* size_bytes = nullptr);

// The whole of the regular file `path` (file_open_regular), at most
// max_bytes long: a larger one is an error stating the limit, read no further.
std::string file_read_whole(const std::string& path, int64_t max_bytes);

// Limits of the JSON files read whole (config.json, indexes, manifests,
// profiles, requests, traces): far above any real one, far below memory.
inline constexpr int64_t kJsonFileMaxBytes = int64_t{1} << 30;

// Reads exactly n bytes at offset; a file that ends first is an error.
void file_pread_all(int fd, const std::string& path, void* out, int64_t n, int64_t offset,
                    const std::string& what);
void file_pwrite_all(int fd, const std::string& path, const void* data, int64_t n, int64_t offset,
                     const std::string& what);

// Why a file could not be written at a path; each program words it its own way.
struct file_write_problem {
  enum kind {
    none,
    is_directory,     // the path is a directory
    no_directory,     // the directory it would be in does not exist
    not_a_directory,  // that directory's name is something else
    cannot_create,    // no file can be created in that directory
    cannot_open,      // the path is an existing file this process may not write
  };
  kind what = none;
  std::string dir;    // the directory the file would be in ("." for a bare name)
  std::string error;  // the system's reason, for cannot_create and cannot_open
};

// Whether a file can be written at `path`: tried by creating (and removing) a
// file of another name in its directory, since permission bits do not bind
// root and read-only or special file systems (/proc) refuse only the creation.
file_write_problem file_write_check(const std::string& path);

// What is at `path` when it exists and is neither a regular file nor a
// directory (through symlinks): "a FIFO", "a character device" (/dev/zero),
// "a block device" or "a socket", where a write would wait for a reader
// forever or go nowhere; "" otherwise.
std::string file_special_kind(const std::string& path);

// Whether writing `output` would overwrite what a command reads: the same
// file as one of `inputs` (the same inode, whatever the names, links or
// symlinks), or a path at or inside the directory `input_dir` (unless it is
// empty). An output that does not exist yet is placed by its existing
// parent's real path. "" when it overlaps nothing, else why: "OUTPUT is
// INPUT" or "OUTPUT is inside DIR".
std::string file_output_overlap(const std::string& output, const std::vector<std::string>& inputs,
                                const std::string& input_dir = "");
