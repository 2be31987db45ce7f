// checkpoint_files: a checkpoint written by hand (two units over a shard group
// of 2, AdamW state, known values, CRCs from checkpoint_crc32) read back: the
// manifest round trip, reads by global position across shard files, state
// planes, checksum and file errors, every manifest validation error, and
// listing and resolving checkpoint directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/files/checkpoint_files.h"
#include "runtime/files/checkpoint_merge.h"
#include "runtime/files/file_io.h"
#include "tests/common/ExpectError.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A fresh directory under the system's temporary one, removed by the test.
class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("fsdpgen_ckpt_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// Element i of unit u's flat weights; plane k of its optimizer state.
float weight_of(int u, int64_t i) {
  return 100.0f * static_cast<float>(u) + static_cast<float>(i) + 0.5f;
}
float state_of(int u, int k, int64_t i) {
  return -(1000.0f * static_cast<float>(k + 1) + 100.0f * static_cast<float>(u) +
           static_cast<float>(i));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

// Two units over a shard group of 2 in a world of 4 (two replicas), AdamW:
//   unit 0 "embed": 10 elements, 5 per shard; tensors a [2, 3] at 0, b [4] at 6
//   unit 1 "block": 7 elements, 4 per shard (one padding element); c [7] at 0
checkpoint_manifest layout() {
  checkpoint_manifest m;
  m.model = "hand";
  m.spec = "hand.fsdp";
  m.step = 12;
  m.sequences = 96;
  m.world = 4;
  m.shard_group = 2;
  m.optimizer = "adamw";
  m.seed = 1337;
  m.data = "synthetic (seed 7)";
  m.loss_scale_enabled = true;
  m.loss_scale = 32768;
  m.loss_scale_finite_steps = 3;
  m.applied_steps = 11;
  m.units.push_back({"embed", 10, 5, 2, {{"a", 0, {2, 3}}, {"b", 6, {4}}}});
  m.units.push_back({"block", 7, 4, 2, {{"c", 0, {7}}}});
  return m;
}

// Writes shard_0000r.bin for every shard rank (weights, then the state
// planes, per unit; padding zero) and fills in the manifest's shards with
// their sections and CRCs; then manifest.json.
checkpoint_manifest write_checkpoint(const fs::path& dir, checkpoint_manifest m = layout()) {
  fs::create_directories(dir);
  m.shards.clear();
  for (int64_t r = 0; r < m.shard_group; ++r) {
    checkpoint_shard sh{"shard_0000" + std::to_string(r) + ".bin", 0, {}};
    std::string bytes;
    for (int u = 0; u < static_cast<int>(m.units.size()); ++u) {
      const checkpoint_unit& unit = m.units[static_cast<size_t>(u)];
      auto section = [&](const char* what, int64_t planes, auto value) {
        std::vector<float> v(static_cast<size_t>(planes * unit.shard_elems), 0.0f);
        for (int64_t k = 0; k < planes; ++k)
          for (int64_t j = 0; j < unit.shard_elems; ++j) {
            const int64_t i = r * unit.shard_elems + j;
            if (i < unit.param_elems)
              v[static_cast<size_t>(k * unit.shard_elems + j)] = value(static_cast<int>(k), i);
          }
        const int64_t n = 4 * static_cast<int64_t>(v.size());
        sh.sections.push_back(
            {u, what, static_cast<int64_t>(bytes.size()), n, checkpoint_crc32(0, v.data(), n)});
        bytes.append(reinterpret_cast<const char*>(v.data()), static_cast<size_t>(n));
      };
      section("weights", 1, [&](int, int64_t i) { return weight_of(u, i); });
      if (unit.state_planes)
        section("state", unit.state_planes, [&](int k, int64_t i) { return state_of(u, k, i); });
    }
    sh.bytes = static_cast<int64_t>(bytes.size());
    write_file(dir / sh.file, bytes);
    m.shards.push_back(sh);
  }
  write_file(dir / "manifest.json", checkpoint_manifest_text(m));
  return m;
}

std::vector<float> weights(checkpoint_reader& r, int unit, int64_t begin, int64_t end) {
  std::vector<float> out(static_cast<size_t>(end - begin), -1.0f);
  r.weights(unit, begin, end, out.data());
  return out;
}

std::vector<float> expected(int64_t begin, int64_t end, auto value) {
  std::vector<float> out;
  for (int64_t i = begin; i < end; ++i)
    out.push_back(value(i));
  return out;
}

TEST_F(CheckpointFiles, Crc32IsZlibsAndContinues) {
  const std::string s = "123456789";
  EXPECT_EQ(checkpoint_crc32(0, s.data(), 9), 0xCBF43926u);  // the standard check value
  EXPECT_EQ(checkpoint_crc32(checkpoint_crc32(0, s.data(), 4), s.data() + 4, 5), 0xCBF43926u);
  EXPECT_EQ(checkpoint_crc32(0, s.data(), 0), 0u);
}

TEST_F(CheckpointFiles, StepDirectoryNames) {
  EXPECT_EQ(checkpoint_step_dir("ckpt", 100), "ckpt/step_00000100");
  EXPECT_EQ(checkpoint_step_dir("/a/b/", 0), "/a/b/step_00000000");
  EXPECT_EQ(checkpoint_step_dir("d", 123456789), "d/step_123456789");
}

TEST_F(CheckpointFiles, ManifestTextReadsBackAsWritten) {
  const fs::path dir = root_ / "step_00000012";
  const checkpoint_manifest m = write_checkpoint(dir);
  const checkpoint_manifest r = checkpoint_manifest_read(dir.string());
  EXPECT_EQ(checkpoint_manifest_text(r), checkpoint_manifest_text(m));
  EXPECT_EQ(slurp(dir / "manifest.json"), checkpoint_manifest_text(r));

  EXPECT_EQ(r.version, kCheckpointVersion);
  EXPECT_EQ(r.model, "hand");
  EXPECT_EQ(r.spec, "hand.fsdp");
  EXPECT_EQ(r.step, 12);
  EXPECT_EQ(r.sequences, 96);
  EXPECT_EQ(r.world, 4);
  EXPECT_EQ(r.shard_group, 2);
  EXPECT_EQ(r.optimizer, "adamw");
  EXPECT_EQ(r.seed, 1337);
  EXPECT_EQ(r.data, "synthetic (seed 7)");
  EXPECT_TRUE(r.loss_scale_enabled);
  EXPECT_EQ(r.loss_scale, 32768.0);
  EXPECT_EQ(r.loss_scale_finite_steps, 3);
  EXPECT_EQ(r.applied_steps, 11);
  ASSERT_EQ(r.units.size(), 2u);
  EXPECT_EQ(r.units[1].name, "block");
  EXPECT_EQ(r.units[1].param_elems, 7);
  EXPECT_EQ(r.units[1].shard_elems, 4);
  EXPECT_EQ(r.units[1].state_planes, 2);
  ASSERT_EQ(r.units[0].tensors.size(), 2u);
  EXPECT_EQ(r.units[0].tensors[1].name, "b");
  EXPECT_EQ(r.units[0].tensors[1].offset, 6);
  EXPECT_EQ(r.units[0].tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.units[0].tensors[0].elems(), 6);
  ASSERT_EQ(r.shards.size(), 2u);
  EXPECT_EQ(r.shards[1].file, "shard_00001.bin");
  // Per shard: embed weights 20 bytes, embed state 40, block weights 16, block state 32.
  EXPECT_EQ(r.shards[1].bytes, 108);
  ASSERT_EQ(r.shards[1].sections.size(), 4u);
  EXPECT_EQ(r.shards[1].sections[2].unit, 1);
  EXPECT_EQ(r.shards[1].sections[2].what, "weights");
  EXPECT_EQ(r.shards[1].sections[2].offset, 60);
  EXPECT_EQ(r.shards[1].sections[2].bytes, 16);
  EXPECT_EQ(r.shards[1].sections[2].crc32, m.shards[1].sections[2].crc32);

  const json j = json::parse(slurp(dir / "manifest.json"));
  EXPECT_EQ(j.at("format"), "fsdpgen-checkpoint");
  EXPECT_EQ(j.at("dtype"), "F32");
}

TEST_F(CheckpointFiles, ReaderReadsByGlobalPositionAcrossShards) {
  const fs::path dir = root_ / "step_00000012";
  write_checkpoint(dir);
  checkpoint_reader r(dir.string(), checkpoint_manifest_read(dir.string()));
  EXPECT_EQ(r.dir(), dir.string());
  EXPECT_EQ(r.manifest().step, 12);
  auto w0 = [](int64_t i) { return weight_of(0, i); };
  auto w1 = [](int64_t i) { return weight_of(1, i); };
  EXPECT_EQ(weights(r, 0, 0, 10), expected(0, 10, w0));
  EXPECT_EQ(weights(r, 0, 3, 8), expected(3, 8, w0));  // shard 0's last 2, shard 1's first 3
  EXPECT_EQ(weights(r, 0, 5, 6), expected(5, 6, w0));  // the first of shard 1
  EXPECT_EQ(weights(r, 1, 2, 7), expected(2, 7, w1));  // up to the padding, not into it
  EXPECT_EQ(weights(r, 0, 4, 4), std::vector<float>{});
  // Back to an evicted unit: read again from the files.
  EXPECT_EQ(weights(r, 0, 6, 10), expected(6, 10, w0));

  for (int k = 0; k < 2; ++k) {
    std::vector<float> s(6, 0.0f);
    r.state(1, k, 1, 7, s.data());
    EXPECT_EQ(s, expected(1, 7, [&](int64_t i) { return state_of(1, k, i); })) << "plane " << k;
    r.state(0, k, 2, 8, s.data());
    EXPECT_EQ(s, expected(2, 8, [&](int64_t i) { return state_of(0, k, i); })) << "plane " << k;
  }

  float out[8];
  expect_error([&] { r.state(0, 2, 0, 1, out); },
               {dir.string(), "unit embed has 2 optimizer state planes, not 3"});
  expect_error([&] { r.state(0, -1, 0, 1, out); }, {"unit embed has 2 optimizer state planes"});
  expect_error([&] { r.weights(1, 0, 9, out); },
               {"unit block: elements [0, 9) outside its flat 8"});
  expect_error([&] { r.weights(0, 3, 2, out); }, {"elements [3, 2) outside its flat 10"});
  expect_error([&] { r.weights(0, -1, 2, out); }, {"elements [-1, 2) outside its flat 10"});
}

TEST_F(CheckpointFiles, ReaderChecksEachSectionsChecksum) {
  const fs::path dir = root_ / "step_00000012";
  const checkpoint_manifest m = write_checkpoint(dir);
  // Flip one bit of shard 1's block weights (section 2, at byte 60).
  const fs::path shard1 = dir / "shard_00001.bin";
  std::string bytes = slurp(shard1);
  bytes[61] = static_cast<char>(bytes[61] ^ 0x10);
  write_file(shard1, bytes);

  checkpoint_reader r(dir.string(), checkpoint_manifest_read(dir.string()));
  // What is not in the corrupt section still reads.
  EXPECT_EQ(weights(r, 1, 0, 4), expected(0, 4, [](int64_t i) { return weight_of(1, i); }));
  EXPECT_EQ(weights(r, 0, 0, 10), expected(0, 10, [](int64_t i) { return weight_of(0, i); }));
  std::vector<float> s(7);
  r.state(1, 0, 0, 7, s.data());
  const std::string want_crc =
      fmt::format("the manifest says {:08x}", m.shards[1].sections[2].crc32);
  float out[7];
  expect_error([&] { r.weights(1, 0, 7, out); },
               {shard1.string(), "weights of unit block (bytes 60..76) fails its checksum",
                want_crc, "the file is corrupt"});

  // A manifest whose CRC is wrong for intact data fails the same way.
  write_checkpoint(dir);
  checkpoint_manifest wrong = checkpoint_manifest_read(dir.string());
  wrong.shards[0].sections[1].crc32 ^= 1;
  checkpoint_reader r2(dir.string(), wrong);
  EXPECT_EQ(weights(r2, 0, 0, 5), expected(0, 5, [](int64_t i) { return weight_of(0, i); }));
  expect_error([&] { r2.state(0, 1, 0, 2, out); },
               {"shard_00000.bin", "state of unit embed (bytes 20..60) fails its checksum"});
}

TEST_F(CheckpointFiles, ReaderNamesATruncatedOrMissingShardFile) {
  const fs::path dir = root_ / "step_00000012";
  write_checkpoint(dir);
  const checkpoint_manifest m = checkpoint_manifest_read(dir.string());
  float out[10];

  fs::resize_file(dir / "shard_00001.bin", 100);
  checkpoint_reader truncated(dir.string(), m);
  truncated.weights(0, 0, 5, out);  // shard 0 only
  expect_error([&] { truncated.weights(0, 0, 10, out); },
               {(dir / "shard_00001.bin").string(),
                "100 bytes, the manifest says 108 (truncated or replaced?)"});

  fs::remove(dir / "shard_00001.bin");
  checkpoint_reader missing(dir.string(), m);
  expect_error([&] { missing.weights(1, 3, 5, out); },
               {"cannot open", (dir / "shard_00001.bin").string(), "No such file"});
}

// Writes a good checkpoint, lets edit change its manifest's JSON, and expects
// reading it to fail with every part.
void expect_manifest_error(const fs::path& dir, const std::function<void(json&)>& edit,
                           const std::vector<std::string>& parts) {
  write_checkpoint(dir);
  json j = json::parse(slurp(dir / "manifest.json"));
  edit(j);
  write_file(dir / "manifest.json", j.dump(1));
  std::vector<std::string> all = {(dir / "manifest.json").string()};
  all.insert(all.end(), parts.begin(), parts.end());
  expect_error([&] { checkpoint_manifest_read(dir.string()); }, all);
}

TEST_F(CheckpointFiles, ManifestValidationNamesTheFileAndTheProblem) {
  const fs::path d = root_ / "step_00000012";
  // The unedited manifest reads, so each error below is the edit's.
  write_checkpoint(d);
  EXPECT_NO_THROW(checkpoint_manifest_read(d.string()));

  expect_manifest_error(d, [](json& j) { j["format"] = "safetensors"; },
                        {"\"format\" is not \"fsdpgen-checkpoint\""});
  expect_manifest_error(d, [](json& j) { j["version"] = 2; },
                        {"checkpoint format version 2, this build reads version 1"});
  expect_manifest_error(d, [](json& j) { j["dtype"] = "BF16"; }, {"\"dtype\" must be \"F32\""});
  expect_manifest_error(d, [](json& j) { j.erase("step"); }, {"missing \"step\""});
  expect_manifest_error(d, [](json& j) { j["world"] = "four"; },
                        {"\"world\" has the wrong type (string)"});
  expect_manifest_error(d, [](json& j) { j["world"] = 3; },
                        {"bad step 12, sequences 96, world 3 or shard group 2"});
  expect_manifest_error(d, [](json& j) { j["optimizer"] = "lion"; },
                        {"unknown optimizer \"lion\""});
  expect_manifest_error(d, [](json& j) { j["applied_steps"] = 13; },
                        {"bad loss scale 32768, finite steps 3 or applied steps 13"});
  expect_manifest_error(d, [](json& j) { j["loss_scale"] = 2.0; },
                        {"\"loss_scale\" must be an object"});
  expect_manifest_error(d, [](json& j) { j["units"] = 1; }, {"\"units\" must be an array"});
  // A unit too large for its shards.
  expect_manifest_error(
      d, [](json& j) { j["units"][1]["param_elems"] = 9; },
      {"unit 1: bad sizes (param_elems 9, shard_elems 4 x 2 ranks, 2 state planes)"});
  // A tensor outside its unit: b [5] at 6 ends at 11 of embed's 10.
  expect_manifest_error(d, [](json& j) { j["units"][0]["tensors"][1]["shape"] = {5}; },
                        {"unit 0 tensor b: elements [6, 11) outside the unit's flat 10"});
  expect_manifest_error(d, [](json& j) { j["units"][0]["tensors"][0]["offset"] = -1; },
                        {"tensor a: elements [-1, 5) outside the unit's flat 10"});
  expect_manifest_error(d, [](json& j) { j["units"][0]["tensors"][0]["shape"] = json::array(); },
                        {"unit 0 tensor a: bad shape"});
  // Tensor names are safetensors names, each once in the checkpoint: named
  // here, not by the safetensors writer merge would reach.
  expect_manifest_error(d, [](json& j) { j["units"][0]["tensors"][1]["name"] = ""; },
                        {"unit 0 tensor 1: \"name\" \"\" is empty"});
  expect_manifest_error(
      d, [](json& j) { j["units"][1]["tensors"][0]["name"] = "__metadata__"; },
      {"unit 1 tensor 0: \"name\" \"__metadata__\" is reserved (the key of the header's "
       "metadata)"});
  expect_manifest_error(d, [](json& j) { j["units"][1]["tensors"][0]["name"] = "a"; },
                        {"unit 1 tensor 0: \"name\" \"a\" is repeated (unit 0 tensor 0 has it)"});
  // Sections must follow the layout: in order, each as long as its unit says.
  expect_manifest_error(
      d, [](json& j) { j["shards"][1]["sections"][1]["offset"] = 24; },
      {"shard 1: section state of unit 0 at byte 24 (40 bytes) does not follow the layout "
       "(expected byte 20, 40 bytes)"});
  expect_manifest_error(
      d, [](json& j) { j["shards"][0]["sections"][2]["bytes"] = 20; },
      {"shard 0: section weights of unit 1 at byte 60 (20 bytes) does not follow the layout "
       "(expected byte 60, 16 bytes)"});
  expect_manifest_error(d, [](json& j) { j["shards"][0]["sections"][3]["unit"] = 2; },
                        {"shard 0: bad section (unit 2, \"state\")"});
  expect_manifest_error(d, [](json& j) { j["shards"][0]["sections"][3]["what"] = "momentum"; },
                        {"bad section (unit 1, \"momentum\")"});
  expect_manifest_error(d, [](json& j) { j["shards"][0]["bytes"] = 112; },
                        {"shard 0: sections cover 108 bytes of the file's 112"});
  expect_manifest_error(d, [](json& j) { j["shards"][1]["file"] = "../shard_00001.bin"; },
                        {"shard 1: bad file name \"../shard_00001.bin\""});
  // One shard file per rank of the shard group.
  expect_manifest_error(d, [](json& j) { j["shards"].erase(1); },
                        {"1 shard files listed for a shard group of 2"});
  expect_manifest_error(d, [](json& j) { j["shards"].push_back(j["shards"][1]); },
                        {"3 shard files listed for a shard group of 2"});

  write_file(d / "manifest.json", "{\"format\": \"fsdpgen-checkpoint\", \"version\": ");
  expect_error([&] { checkpoint_manifest_read(d.string()); },
               {(d / "manifest.json").string(), "not valid JSON"});
  write_file(d / "manifest.json", "[1, 2]");
  expect_error([&] { checkpoint_manifest_read(d.string()); }, {"not a JSON object"});
  fs::remove(d / "manifest.json");
  expect_error([&] { checkpoint_manifest_read(d.string()); },
               {d.string(), "not a checkpoint (cannot read manifest.json"});
}

// Sizes are checked in 64-bit arithmetic and against the shard files on disk
// when the manifest is read, before a reader allocates anything: a shape
// whose product wraps to 0, counts past any run, and shards larger than
// their files are errors naming the manifest and the field.
TEST_F(CheckpointFiles, ManifestSizesAreCheckedBeforeAnythingIsAllocated) {
  const fs::path d = root_ / "step_00000012";
  const int64_t k32 = int64_t{1} << 32, k40 = int64_t{1} << 40;
  expect_manifest_error(d,
                        [&](json& j) {
                          j["units"][0]["tensors"][0]["shape"] = {k32, k32};
                        },
                        {"unit 0 tensor a: shape: 4294967296 x 4294967296 overflows 64 bits"});
  expect_manifest_error(
      d, [&](json& j) { j["units"][0]["tensors"][1]["offset"] = INT64_MAX - 2; },
      {"unit 0 tensor b: elements [9223372036854775805, 2^63 and past) outside the unit's flat "
       "10"});
  expect_manifest_error(d, [](json& j) { j["sequences"] = INT64_MAX; },
                        {"bad step 12, sequences 9223372036854775807, world 4 or shard group 2"});
  expect_manifest_error(d, [](json& j) { j["step"] = INT64_MAX; },
                        {"bad step 9223372036854775807"});
  // A whole number written as a float (found by runtime_fuzz_manifest):
  // an error, not a cast out of range.
  expect_manifest_error(d, [](json& j) { j["step"] = 1e19; },
                        {"\"step\" must be whole numbers, not 1e+19"});
  expect_manifest_error(d, [](json& j) { j["units"][0]["shard_elems"] = 2.5; },
                        {"\"shard_elems\" must be whole numbers, not 2.5"});
  expect_manifest_error(d,
                        [](json& j) {
                          j["units"][0]["tensors"][0]["shape"] = {2, 5.5e48};
                        },
                        {"\"shape\" must be whole numbers, not [2,5.5e+48]"});
  expect_manifest_error(d, [](json& j) { j["units"][1]["shard_elems"] = int64_t{1} << 62; },
                        {"unit 1: shard_elems: 4611686018427387904 x 2 overflows 64 bits"});
  expect_manifest_error(d, [](json& j) { j["units"][1]["shard_elems"] = int64_t{1} << 61; },
                        {"unit 1: shard_elems: 12 x 2305843009213693952 overflows 64 bits"});
  // A consistent manifest of 2^40-element shards over files of 108 bytes:
  // refused when read, not a bad_alloc when a section is.
  expect_manifest_error(
      d,
      [&](json& j) {
        j["units"][1]["shard_elems"] = k40;
        for (json& shard : j["shards"]) {
          int64_t at = 0;
          for (json& x : shard["sections"]) {
            const int64_t planes = x["what"] == "weights" ? 1 : 2;
            if (x["unit"] == 1) x["bytes"] = 4 * planes * k40;
            x["offset"] = at;
            at += x["bytes"].get<int64_t>();
          }
          shard["bytes"] = at;
        }
      },
      {"shard 0: \"bytes\" is 13194139533372, but", "shard_00000.bin has 108 bytes"});
  write_checkpoint(d);
  fs::remove(d / "shard_00001.bin");
  expect_error([&] { checkpoint_manifest_read(d.string()); },
               {(d / "manifest.json").string(), "shard 1: \"file\"",
                (d / "shard_00001.bin").string(), "No such file"});
}

// An output is refused when it is one of the inputs (the same inode by any
// name) or lies inside the input directory, existing or not; a sibling whose
// name merely starts with the directory's is not inside it.
TEST_F(CheckpointFiles, OutputOverlapIsTheSameFileOrInsideTheDirectory) {
  const fs::path d = root_ / "step_00000012";
  write_checkpoint(d);
  const std::string shard = (d / "shard_00000.bin").string();
  fs::create_hard_link(shard, root_ / "linked.bin");
  fs::create_directory_symlink(d, root_ / "latest");
  EXPECT_EQ(file_output_overlap((root_ / "linked.bin").string(), {shard}),
            (root_ / "linked.bin").string() + " is " + shard);
  EXPECT_EQ(file_output_overlap((root_ / "other.bin").string(), {shard}), "");
  for (const fs::path& inside : {d / "shard_00000.bin", d / "new.safetensors", d / "sub/x", d,
                                 root_ / "latest/new.safetensors", d / "../step_00000012/y"})
    EXPECT_EQ(file_output_overlap(inside.string(), {}, d.string()),
              inside.string() + " is inside " + d.string());
  for (const fs::path& outside : {root_ / "step_00000012x", root_ / "model.safetensors", root_})
    EXPECT_EQ(file_output_overlap(outside.string(), {}, d.string()), "") << outside;
}

// fsdpgen merge never writes into the checkpoint it reads: the shard named as
// its output is refused and left as it was, before anything is written.
TEST_F(CheckpointFiles, MergeRefusesAnOutputInsideItsCheckpoint) {
  const fs::path d = root_ / "step_00000012";
  write_checkpoint(d);
  const std::string before = slurp(d / "shard_00000.bin");
  expect_error([&] { checkpoint_merge(d.string(), (d / "shard_00000.bin").string(), "F32"); },
               {(d / "shard_00000.bin").string() + " is inside " + d.string(),
                "merge writes nothing into the checkpoint it reads"});
  const hf_directory_files directory;
  expect_error([&] { checkpoint_merge(root_.string(), (d / "hf").string(), "F32", &directory); },
               {(d / "hf").string() + " is inside " + d.string()});
  EXPECT_EQ(slurp(d / "shard_00000.bin"), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(d), fs::directory_iterator()), 3);
  const checkpoint_merged m =
      checkpoint_merge(d.string(), (root_ / "model.safetensors").string(), "F32");
  EXPECT_EQ(m.tensors, 3);
}

TEST_F(CheckpointFiles, ListHasCompleteCheckpointsInStepOrder) {
  auto make = [&](const std::string& name, bool manifest) {
    fs::create_directories(root_ / name);
    if (manifest) write_file(root_ / name / "manifest.json", "{}");
  };
  // Created out of order; 100000000 has more digits than the others.
  make("step_00000010", true);
  make("step_100000000", true);
  make("step_00000002", true);
  make("step_99999999", true);
  make("step_00000005.partial", true);  // an interrupted save
  make("step_00000007", false);         // no manifest: incomplete
  make("step_abc", true);
  make("other", true);
  make("step_", true);
  write_file(root_ / "step_00000003", "a file, not a directory");
  const std::string r = root_.string();
  EXPECT_EQ(checkpoint_list(r),
            (std::vector<std::string>{r + "/step_00000002", r + "/step_00000010",
                                      r + "/step_99999999", r + "/step_100000000"}));
  EXPECT_EQ(checkpoint_list((root_ / "missing").string()), std::vector<std::string>{});
  EXPECT_EQ(checkpoint_list((root_ / "step_00000003").string()), std::vector<std::string>{});
}

TEST_F(CheckpointFiles, ResolveTakesACheckpointOrTheNewestInADirectory) {
  const fs::path ckpt = root_ / "ckpt";
  write_checkpoint(ckpt / "step_00000004");
  write_checkpoint(ckpt / "step_00000012");
  fs::create_directories(ckpt / "step_00000020.partial");
  fs::copy(ckpt / "step_00000012", ckpt / "step_00000020.partial");
  fs::create_directories(ckpt / "step_00000030");  // no manifest yet

  EXPECT_EQ(checkpoint_resolve((ckpt / "step_00000004").string()),
            (ckpt / "step_00000004").string());
  EXPECT_EQ(checkpoint_resolve(ckpt.string()), (ckpt / "step_00000012").string());

  fs::create_directories(root_ / "empty");
  expect_error([&] { checkpoint_resolve((root_ / "empty").string()); },
               {(root_ / "empty").string(), "no complete checkpoint in it"});
  expect_error([&] { checkpoint_resolve((ckpt / "step_00000030").string()); },
               {"step_00000030", "no complete checkpoint in it"});
  expect_error([&] { checkpoint_resolve((root_ / "nowhere").string()); },
               {(root_ / "nowhere").string(), "no such checkpoint or checkpoint directory"});
  write_file(root_ / "file", "x");
  expect_error([&] { checkpoint_resolve((root_ / "file").string()); },
               {"no such checkpoint or checkpoint directory"});
}

}  // namespace
