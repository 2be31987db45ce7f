// checkpoint_merge: checkpoint shards -> one safetensors file.
#include "runtime/files/checkpoint_merge.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "runtime/files/checkpoint_files.h"
#include "runtime/files/safetensors.h"

checkpoint_merged checkpoint_merge(const std::string& checkpoint, const std::string& out,
                                   const std::string& dtype) {
  if (dtype != "F32" && dtype != "BF16" && dtype != "F16")
    throw std::runtime_error(fmt::format("unknown dtype {} (F32, BF16 or F16)", dtype));
  checkpoint_merged r;
  r.checkpoint = checkpoint_resolve(checkpoint);
  checkpoint_reader reader(r.checkpoint, checkpoint_manifest_read(r.checkpoint));
  const checkpoint_manifest& m = reader.manifest();
  r.step = m.step;

  std::vector<safetensors_entry> entries;
  for (const checkpoint_unit& u : m.units)
    for (const checkpoint_tensor& t : u.tensors)
      entries.push_back({t.name, t.shape});
  // The metadata --save writes, so that both files are the same at one step.
  const safetensors_layout layout = safetensors_plan(
      entries, dtype,
      {{"format", "pt"}, {"fsdpgen_spec", m.spec}, {"fsdpgen_step", std::to_string(m.step)}});

  const std::string partial = out + ".partial";
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0)
    throw std::runtime_error(fmt::format("cannot create {}: {}", partial, std::strerror(errno)));
  try {
    safetensors_write_header(fd, partial, layout);
    std::vector<float> values;
    size_t i = 0;
    for (size_t u = 0; u < m.units.size(); ++u)
      for (const checkpoint_tensor& t : m.units[u].tensors) {
        values.resize(static_cast<size_t>(t.elems()));
        reader.weights(static_cast<int>(u), t.offset, t.offset + t.elems(), values.data());
        safetensors_write(fd, partial, layout.tensors[i++], 0, t.elems(), values.data());
        ++r.tensors;
        r.params += t.elems();
      }
    if (::fsync(fd) != 0)
      throw std::runtime_error(fmt::format("cannot sync {}: {}", partial, std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    std::remove(partial.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(partial.c_str(), out.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(partial.c_str());
    throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", partial, out, why));
  }
  r.bytes = layout.file_bytes;
  return r;
}
