// file_io: whole reads and writes at an offset (pread/pwrite until done,
// retrying interrupted calls) for the weights and checkpoint files. Errors
// throw std::runtime_error "PATH: reading WHAT at byte N: REASON".
#pragma once

#include <cstdint>
#include <string>

// Reads exactly n bytes at offset; a file that ends first is an error.
void file_pread_all(int fd, const std::string& path, void* out, int64_t n, int64_t offset,
                    const std::string& what);
void file_pwrite_all(int fd, const std::string& path, const void* data, int64_t n, int64_t offset,
                     const std::string& what);
