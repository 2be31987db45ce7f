// safetensors: round trips in F32, BF16 and F16, writers that each own part of the
// file, ranged reads, F16 decoding, and an error naming the path and the
// problem for every kind of malformed file. Expected bytes are written by hand.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <unistd.h>
#include "tests/common/ExpectError.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/files/safetensors.h"

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("fsdpgen_st_" + std::to_string(getpid()) + "_" + name))
      .string();
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file from a JSON header and data bytes; header_bytes overrides the
// length field when >= 0.
std::string raw_file(const std::string& json, const std::string& data, int64_t header_bytes = -1) {
  uint64_t n = header_bytes >= 0 ? static_cast<uint64_t>(header_bytes) : json.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; i++)
    out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json + data;
}

struct writer {
  int fd;
  std::string path;
  explicit writer(const std::string& p)
      : fd(::open(p.c_str(), O_WRONLY | O_CREAT, 0644)), path(p) {}
  ~writer() { ::close(fd); }
};

std::vector<float> read_all(const safetensors_file& f, const std::string& name) {
  const safetensors_tensor* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<float> v(t->elems());
  safetensors_read(f, *t, 0, t->elems(), v.data());
  return v;
}

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; i++)
    v[i] = scale * static_cast<float>(i) - 3.0f + 1.0f / 3.0f;
  return v;
}

const std::vector<safetensors_entry> kEntries = {{"transformer.wte.weight", {5, 3}},
                                                 {"transformer.ln_f.bias", {3}},
                                                 {"empty", {0, 4}},
                                                 {"scalar", {}}};

void write_whole(const std::string& path, const safetensors_layout& layout) {
  writer w(path);
  safetensors_write_header(w.fd, path, layout);
  for (const safetensors_tensor& t : layout.tensors) {
    std::vector<float> v = ramp(t.elems(), 0.25f);
    safetensors_write(w.fd, path, t, 0, t.elems(), v.data());
  }
}

TEST(Safetensors, PlanIsTheFormatByteForByte) {
  safetensors_layout l = safetensors_plan({{"x", {2}}}, "F32", {{"format", "pt"}});
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 85u);  // padded with 3 spaces to 88, so 8 + 88 is a multiple of 8
  EXPECT_EQ(l.header, raw_file(json + "   ", ""));
  EXPECT_EQ(l.file_bytes, 8 + 88 + 8);
  ASSERT_EQ(l.tensors.size(), 1u);
  EXPECT_EQ(l.tensors[0].offset, 96);
  EXPECT_EQ(l.tensors[0].bytes, 8);

  const std::string path = temp_path("exact.safetensors");
  {
    writer w(path);
    safetensors_write_header(w.fd, path, l);
    const float x[2] = {1.0f, -2.0f};
    safetensors_write(w.fd, path, l.tensors[0], 0, 2, x);
  }
  EXPECT_EQ(slurp(path), l.header + std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8));
  std::filesystem::remove(path);
}

TEST(Safetensors, RoundTripF32) {
  const std::string path = temp_path("f32.safetensors");
  safetensors_layout layout = safetensors_plan(kEntries, "F32", {{"format", "pt"}, {"step", "7"}});
  write_whole(path, layout);
  safetensors_file f = safetensors_open(path);
  EXPECT_EQ(f.path, path);
  EXPECT_EQ(f.file_bytes, layout.file_bytes);
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"step", "7"}}));
  ASSERT_EQ(f.tensors.size(), 4u);
  for (const safetensors_entry& e : kEntries) {
    const safetensors_tensor* t = f.find(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->dtype, "F32");
    EXPECT_EQ(t->shape, e.shape);
    EXPECT_EQ(read_all(f, e.name), ramp(t->elems(), 0.25f)) << e.name;
  }
  EXPECT_EQ(f.find("scalar")->elems(), 1);
  EXPECT_EQ(f.find("missing"), nullptr);
  std::filesystem::remove(path);
}

TEST(Safetensors, RoundTripBF16RoundsToNearestEven) {
  const std::string path = temp_path("bf16.safetensors");
  safetensors_layout layout = safetensors_plan({{"w", {6}}}, "BF16", {});
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties go to even (1).
  const std::vector<float> values = {1.0f, -2.5f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0.1f, 0.0f};
  {
    writer w(path);
    safetensors_write_header(w.fd, path, layout);
    safetensors_write(w.fd, path, layout.tensors[0], 0, 6, values.data());
  }
  EXPECT_EQ(slurp(path).substr(layout.header.size()),
            std::string("\x80\x3f\x20\xc0\x80\x3f\x82\x3f\xcd\x3d\x00\x00", 12));
  safetensors_file f = safetensors_open(path);
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(f.tensors[0].dtype, "BF16");
  EXPECT_EQ(read_all(f, "w"),
            (std::vector<float>{1.0f, -2.5f, 1.0f, 1.0f + 0x1p-6f, 0.10009765625f, 0.0f}));
  std::filesystem::remove(path);
}

// Two ranks, each with its own descriptor, write disjoint halves of every
// tensor in either order; the file equals one written by a single process.
TEST(Safetensors, RanksWriteDisjointParts) {
  for (const char* dtype : {"F32", "BF16"}) {
    const std::string whole = temp_path("whole.safetensors"),
                      parts = temp_path("parts.safetensors");
    safetensors_layout layout = safetensors_plan(kEntries, dtype, {{"format", "pt"}});
    write_whole(whole, layout);
    std::filesystem::remove(parts);
    {
      writer rank0(parts), rank1(parts);
      for (int rank : {1, 0}) {
        const writer& w = rank == 0 ? rank0 : rank1;
        for (const safetensors_tensor& t : layout.tensors) {
          const std::vector<float> v = ramp(t.elems(), 0.25f);
          const int64_t begin = rank * t.elems() / 2, end = (rank + 1) * t.elems() / 2;
          safetensors_write(w.fd, parts, t, begin, end, v.data() + begin);
        }
        if (rank == 1) safetensors_write_header(rank0.fd, parts, layout);
      }
    }
    EXPECT_EQ(slurp(parts), slurp(whole)) << dtype;
    EXPECT_EQ(read_all(safetensors_open(parts), "transformer.wte.weight"),
              read_all(safetensors_open(whole), "transformer.wte.weight"));
    std::filesystem::remove(whole);
    std::filesystem::remove(parts);
  }
}

TEST(Safetensors, PartialReadsAcrossChunks) {
  const std::string path = temp_path("big.safetensors");
  const int64_t n = 50'000;  // 200 KB of F32, more than one 64 KB read buffer
  for (const char* dtype : {"F32", "BF16"}) {
    safetensors_layout layout = safetensors_plan({{"a", {7}}, {"big", {n}}}, dtype, {});
    const std::vector<float> values = ramp(n, 1.0f / 64);
    {
      writer w(path);
      safetensors_write_header(w.fd, path, layout);
      safetensors_write(w.fd, path, layout.tensors[1], 0, n, values.data());
      safetensors_write(w.fd, path, layout.tensors[0], 0, 7, values.data());
    }
    safetensors_file f = safetensors_open(path);
    const safetensors_tensor& t = *f.find("big");
    for (auto [begin, end] :
         {std::pair<int64_t, int64_t>{0, 1}, {16'383, 49'000}, {n - 5, n}, {9, 9}}) {
      std::vector<float> part(end - begin);
      safetensors_read(f, t, begin, end, part.data());
      for (int64_t i = begin; i < end; i++) {
        const float expected =
            std::string(dtype) == "F32" ? values[i] : bf16_to_float(bf16_from_float(values[i]));
        ASSERT_EQ(part[i - begin], expected) << dtype << " element " << i;
      }
    }
  }
  std::filesystem::remove(path);
}

TEST(Safetensors, DecodesF16) {
  const std::string path = temp_path("f16.safetensors");
  // 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal),
  // 0.333251953125, -0, +inf, -inf, NaN
  const uint16_t halves[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400,
                             0x3555, 0x8000, 0x7c00, 0xfc00, 0x7e00};
  std::string data(reinterpret_cast<const char*>(halves), sizeof halves);
  write_file(path, raw_file(R"({"h":{"dtype":"F16","shape":[2,5],"data_offsets":[0,20]}})", data));
  std::vector<float> v = read_all(safetensors_open(path), "h");
  ASSERT_EQ(v.size(), 10u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_EQ(v[3], 0x1p-24f);
  EXPECT_EQ(v[4], 0x1p-14f);
  EXPECT_EQ(v[5], 0.333251953125f);
  EXPECT_EQ(v[6], 0.0f);
  EXPECT_TRUE(std::signbit(v[6]));
  EXPECT_EQ(v[7], std::numeric_limits<float>::infinity());
  EXPECT_EQ(v[8], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(v[9]));
  std::filesystem::remove(path);
}

TEST(Safetensors, HostileFilesGetNamedErrors) {
  const std::string path = temp_path("hostile.safetensors");
  const std::string eight(8, 'x');
  struct hostile {
    std::string bytes;
    std::vector<std::string> message;
  };
  const std::vector<hostile> cases = {
      {"", {"0 bytes, too short for the 8-byte header length"}},
      {std::string("\x10\x00\x00", 3), {"3 bytes, too short"}},
      {raw_file("{}", "", 1000), {"header length 1000 runs past the end of the file (10 bytes)"}},
      {raw_file("{}", "", 200'000'000), {"header length 200000000 exceeds", "100000000"}},
      {raw_file("", ""), {"not valid JSON"}},
      {raw_file(R"({"a":{"dtype":"F32")", ""), {"not valid JSON"}},
      {raw_file(R"({"a":{"dtype":"F32","shape":[1e400]}})", ""), {"not valid JSON", "1e400"}},
      {raw_file("[1, 2]", ""), {"not a JSON object"}},
      {raw_file(std::string(100'000, '[') + std::string(100'000, ']'), ""), {"not a JSON object"}},
      {raw_file(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor 'w'", "unknown dtype \"F33\"", "BF16"}},
      {raw_file(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", eight),
       {"tensor 'w'", "missing \"shape\""}},
      {raw_file(R"({"w":[1]})", eight), {"tensor 'w'", "not a JSON object"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       {"tensor 'w'", "shape entry -2"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", eight),
       {"tensor 'w'", "shape entry 1.5"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       {"tensor 'w'", "shape [3] of F32 needs 12 bytes but data_offsets [0, 8] span 8"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})",
                eight),
       {"tensor 'w'", "needs more bytes than the data section has (8)"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
       {"tensor 'w'", "data_offsets [0, 16] run past the end of the data (8 bytes)"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight),
       {"tensor 'w'", "end before they begin"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
       {"tensor 'w'", "\"data_offsets\" [0] is not two non-negative integers"}},
      {raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                eight),
       {"tensor 'b'", "overlap tensor 'a'"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       {"data bytes [0, 4) before tensor 'w' belong to no tensor"}},
      {raw_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       {"data section is 8 bytes but the tensors cover only 4"}},
      {raw_file(R"({"__metadata__":{"step":7}})", ""), {"\"__metadata__\" value of \"step\""}},
      {raw_file(R"({"__metadata__":"pt"})", ""), {"\"__metadata__\" is not a JSON object"}},
  };
  for (const hostile& h : cases) {
    write_file(path, h.bytes);
    std::vector<std::string> parts = h.message;
    parts.push_back(path);
    expect_error([&] { safetensors_open(path); }, parts);
  }
  expect_error([&] { safetensors_open(path + ".missing"); }, {path + ".missing", "cannot open"});
  std::filesystem::remove(path);
}

// F16 written by hand: 1, -2, 65504 (largest finite), 2^-24 (smallest
// subnormal), 1 + 2^-11 (a tie: to even, 1) and 1 + 3 * 2^-11 (a tie: up to
// 1 + 2^-9). A finite value beyond 65504 would become infinity: refused.
TEST(Safetensors, WritesF16RoundingToNearestEvenAndRefusesOverflow) {
  const std::string path = temp_path("f16w.safetensors");
  safetensors_layout layout = safetensors_plan({{"w", {6}}}, "F16", {});
  const std::vector<float> values = {1.0f,     -2.0f,           65504.0f,
                                     0x1p-24f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f};
  {
    writer w(path);
    safetensors_write_header(w.fd, path, layout);
    safetensors_write(w.fd, path, layout.tensors[0], 0, 6, values.data());
  }
  EXPECT_EQ(slurp(path).substr(layout.header.size()),
            std::string("\x00\x3c\x00\xc0\xff\x7b\x01\x00\x00\x3c\x02\x3c", 12));
  EXPECT_EQ(read_all(safetensors_open(path), "w"),
            (std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f, 1.0f, 1.0f + 0x1p-9f}));
  const float big[] = {0.5f, 70000.0f};
  writer w(path);
  expect_error([&] { safetensors_write(w.fd, path, layout.tensors[0], 0, 2, big); },
               {path, "tensor 'w'", "element 1 is 70000", "65504"});
  std::filesystem::remove(path);
}

TEST(Safetensors, ReadAndWriteCheckTheirArguments) {
  const std::string path = temp_path("args.safetensors");
  write_file(path, raw_file(R"({"i":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
                            std::string(8, '\0')));
  safetensors_file f = safetensors_open(path);
  float x[2];
  expect_error([&] { safetensors_read(f, f.tensors[0], 0, 1, x); },
               {path, "tensor 'i'", "dtype I64 cannot be read as float"});
  expect_error([&] { safetensors_read(f, f.tensors[0], 0, 2, x); },
               {path, "tensor 'i'", "element range [0, 2) is outside [0, 1)"});
  expect_error([] { safetensors_plan({{"a", {1}}, {"a", {2}}}, "F32", {}); }, {"'a'", "repeated"});
  expect_error([] { safetensors_plan({{"a", {-1}}}, "F32", {}); }, {"'a'", "negative"});
  expect_error([] { safetensors_plan({{"a", {1}}}, "F64", {}); }, {"\"F64\"", "F32, BF16, F16"});
  std::filesystem::remove(path);
}

}  // namespace
