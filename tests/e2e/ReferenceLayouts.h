// ReferenceLayouts: the layouts in which the reference tests (GPT-2, llama and
// Qwen2 against Hugging Face transformers) train a fixture's spec: as written
// (one rank), full_shard over 2 ranks and hybrid_shard over 2x2, each with the
// fixture's global batch of 4 sequences; and a safetensors file's tensors.
#pragma once

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>

#include "tests/e2e/E2e.h"

namespace fsdpgen::test {

struct reference_layout {
  const char* name;
  int world;
  const char* parallel;  // replaces the spec's world and sharding
  int micro_batch;       // per rank: 4 sequences per step in all
};
inline constexpr reference_layout kReferenceLayouts[] = {
    {"single", 1, "world     = 1\n  sharding  = no_shard", 4},
    {"full_shard_w2", 2, "world     = 2\n  sharding  = full_shard", 2},
    {"hybrid_w4", 4, "world     = 4\n  sharding  = hybrid_shard\n  shard_group = 2", 1},
};

inline void PrintTo(const reference_layout& l, std::ostream* os) {
  *os << l.name;
}

// The fixture's spec `spec_name` for a layout, its token file named by
// absolute path.
inline std::string reference_spec(const std::filesystem::path& fixture, const char* spec_name,
                                  const reference_layout& l) {
  std::string s = file_bytes(fixture / spec_name);
  auto replace = [&s](const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) s.replace(at, from.size(), to);
  };
  replace("world     = 1\n  sharding  = no_shard", l.parallel);
  replace("micro_batch = 4", fmt::format("micro_batch = {}", l.micro_batch));
  replace("tokens(\"tokens.bin\")",
          fmt::format("tokens(\"{}\")", (fixture / "tokens.bin").string()));
  return s;
}

inline double relative(double got, double want) {
  return std::abs(got - want) / std::abs(want);
}

// Each tensor's data bytes of a safetensors file, by name (its JSON header read here).
inline std::map<std::string, std::string> tensor_bytes(const std::filesystem::path& path) {
  const std::string all = file_bytes(path);
  std::map<std::string, std::string> out;
  if (all.size() < 8) return out;
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(all.substr(8, n));
  for (const auto& [name, t] : header.items())
    if (name != "__metadata__") {
      const int64_t begin = t.at("data_offsets")[0], end = t.at("data_offsets")[1];
      out[name] = all.substr(8 + n + static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    }
  return out;
}

}  // namespace fsdpgen::test
