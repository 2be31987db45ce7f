// libFuzzer target for checkpoint manifests: the input as a checkpoint's
// manifest.json (checkpoint_manifest_read). A bad manifest must be a
// std::runtime_error; one that reads must keep its promises (a shard per
// shard rank, sections in order inside their files, tensors inside their
// units), print to a manifest that reads back the same, and let
// checkpoint_reader read every small unit from zero-filled shard files
// (a checksum mismatch being a named error), else we abort.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/files/checkpoint_files.h"
#include "tests/fuzz/Fuzz.h"

namespace {

using fuzz::check;

constexpr int64_t kMaxShardBytes = int64_t{1} << 20;  // shard files made for the reader

void check_manifest(const checkpoint_manifest& m) {
  check(static_cast<int64_t>(m.shards.size()) == m.shard_group, "one shard per shard rank");
  check(m.world >= 1 && m.shard_group >= 1 && m.world % m.shard_group == 0,
        "the shard group divides the world");
  for (const checkpoint_unit& u : m.units) {
    const __int128 flat = static_cast<__int128>(u.shard_elems) * m.shard_group;
    check(u.param_elems >= 0 && flat >= u.param_elems, "the shards hold the unit's elements");
    for (const checkpoint_tensor& t : u.tensors) {
      __int128 elems = 1;
      for (int64_t d : t.shape)
        elems *= d;
      check(t.offset >= 0 && t.offset + elems <= flat, "a tensor lies inside its unit");
    }
  }
  for (const checkpoint_shard& s : m.shards) {
    int64_t at = 0;
    for (const checkpoint_section& x : s.sections) {
      check(x.unit >= 0 && x.unit < static_cast<int>(m.units.size()), "a section's unit exists");
      check(x.offset == at && x.bytes >= 0, "sections follow each other");
      at += x.bytes;
    }
    check(at == s.bytes, "the sections fill the shard file");
  }
}

// Zero-filled shard files where they are small; false when any is not.
bool make_shards(const std::string& dir, const checkpoint_manifest& m) {
  for (const checkpoint_shard& s : m.shards)
    if (s.bytes > kMaxShardBytes || s.file.size() > 200) return false;
  for (const checkpoint_shard& s : m.shards) {
    const std::string path = dir + "/" + s.file;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::ftruncate(fd, s.bytes) != 0) fuzz::harness_fail("cannot write " + path);
    ::close(fd);
  }
  return true;
}

void read_units(const std::string& dir, const checkpoint_manifest& m) {
  checkpoint_reader reader(dir, m);
  for (size_t unit = 0; unit < m.units.size(); ++unit) {
    const checkpoint_unit& u = m.units[unit];
    std::vector<float> values(static_cast<size_t>(u.param_elems));
    try {
      reader.weights(static_cast<int>(unit), 0, u.param_elems, values.data());
      for (int64_t plane = 0; plane < u.state_planes; ++plane)
        reader.state(static_cast<int>(unit), static_cast<int>(plane), 0, u.param_elems,
                     values.data());
    } catch (const std::runtime_error&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const std::string dir = fuzz::scratch_dir() + "/checkpoint";
  fs::remove_all(dir);
  fs::create_directory(dir);
  fuzz::write_file("checkpoint/manifest.json", data, size);
  checkpoint_manifest m;
  try {
    m = checkpoint_manifest_read(dir);
  } catch (const std::runtime_error&) {
    return 0;
  }
  check_manifest(m);
  const std::string text = checkpoint_manifest_text(m);
  fuzz::write_file("checkpoint/manifest.json", text.data(), text.size());
  try {
    check(checkpoint_manifest_text(checkpoint_manifest_read(dir)) == text,
          "a printed manifest reads back the same");
  } catch (const std::runtime_error& e) {
    fuzz::broken(std::string("a printed manifest reads back: ") + e.what());
  }
  if (make_shards(dir, m)) read_units(dir, m);
  return 0;
}
