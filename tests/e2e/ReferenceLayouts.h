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
#include <vector>

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

// How far fsdpgen's steps may be from transformers', relative (lr 0: not
// compared), and how much the loss must fall over the steps at least.
struct reference_tolerances {
  double loss = 0, norm = 0, lr = 0;
  double fall = 0.1;
};

// Trains the fixture's spec `spec_name` in layout `l` from the fixture's
// model.safetensors (--init-from), in e2e_dir(<fixture's folder>_<layout>),
// and compares each step's loss and gradient norm (and lr, where tol.lr > 0)
// with expected.json, transformers' run, printing each; the loss must fall
// by tol.fall over the steps.
inline void expect_steps_match_reference(const std::filesystem::path& fixture,
                                         const char* spec_name, const reference_layout& l,
                                         const reference_tolerances& tol) {
  const nlohmann::json expected = nlohmann::json::parse(file_bytes(fixture / "expected.json"));
  const std::vector<double> losses = expected.at("losses"), norms = expected.at("grad_norms");
  const std::vector<double> lrs = tol.lr > 0 ? expected.at("lrs").get<std::vector<double>>()
                                             : std::vector<double>(losses.size(), 0.0);
  const std::filesystem::path dir = e2e_dir(fixture.filename().string() + "_" + l.name);
  const std::filesystem::path bin = build_binary(dir, reference_spec(fixture, spec_name, l));
  const CmdResult r = run_binary(l.world, bin,
                                 fmt::format("--metrics metrics.jsonl --init-from {}",
                                             (fixture / "model.safetensors").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<nlohmann::json> got = read_metrics(dir / "metrics.jsonl");
  ASSERT_EQ(got.size(), losses.size()) << r.out;
  for (size_t s = 0; s < got.size(); ++s) {
    const double loss = got[s].at("loss").get<double>(), lr = got[s].at("lr").get<double>(),
                 norm = got[s].at("grad_norm").get<double>();
    std::printf(
        "step %zu: loss %.9f, transformers %.9f (%.2e); lr %.9g; grad_norm %.9f, transformers "
        "%.9f (%.2e)\n",
        s + 1, loss, losses[s], relative(loss, losses[s]), lr, norm, norms[s],
        relative(norm, norms[s]));
    EXPECT_LE(relative(loss, losses[s]), tol.loss) << "step " << s + 1 << " loss";
    if (tol.lr > 0) {
      EXPECT_LE(relative(lr, lrs[s]), tol.lr) << "step " << s + 1 << " lr";
    }
    EXPECT_LE(relative(norm, norms[s]), tol.norm) << "step " << s + 1 << " grad_norm";
  }
  EXPECT_LT(got.back().at("loss").get<double>(),
            (1 - tol.fall) * got.front().at("loss").get<double>())
      << "the loss should fall";
}

// The fixture's spec in layout `l` loaded from the model directory transformers'
// save_pretrained wrote (fixture/hf: config.json, shards, index), in
// e2e_dir(<fixture's folder>_hf_<layout>): each step's loss within
// `loss_tolerance` of expected.json's.
inline void expect_model_directory_trains(const std::filesystem::path& fixture,
                                          const char* spec_name, const reference_layout& l,
                                          double loss_tolerance) {
  const nlohmann::json expected = nlohmann::json::parse(file_bytes(fixture / "expected.json"));
  const std::vector<double> losses = expected.at("losses");
  const std::filesystem::path dir = e2e_dir(fixture.filename().string() + "_hf_" + l.name);
  const std::filesystem::path bin = build_binary(dir, reference_spec(fixture, spec_name, l));
  const CmdResult r =
      run_binary(l.world, bin,
                 fmt::format("--metrics metrics.jsonl --init-from {}", (fixture / "hf").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const std::vector<double> got = read_losses(dir / "metrics.jsonl");
  ASSERT_EQ(got.size(), losses.size()) << r.out;
  for (size_t s = 0; s < got.size(); ++s)
    EXPECT_LE(relative(got[s], losses[s]), loss_tolerance) << l.name << " step " << s + 1;
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

// transformers' weights in, fsdpgen's out (F32, no step run, 2 ranks, in
// e2e_dir(<fixture's folder>_round_trip)): the fixture's `tensors` tensors,
// `among` one of them, each with its bytes unchanged under the same name.
inline void expect_weights_round_trip(const std::filesystem::path& fixture, const char* spec_name,
                                      size_t tensors, const std::string& among) {
  const std::filesystem::path dir = e2e_dir(fixture.filename().string() + "_round_trip");
  const std::filesystem::path bin =
      build_binary(dir, reference_spec(fixture, spec_name, kReferenceLayouts[1]));
  std::filesystem::remove(dir / "out.safetensors");
  const CmdResult r = run_binary(2, bin,
                                 fmt::format("--steps 0 --init-from {} --save out.safetensors",
                                             (fixture / "model.safetensors").string()));
  ASSERT_EQ(r.status, 0) << r.out;
  const auto want = tensor_bytes(fixture / "model.safetensors");
  const auto got = tensor_bytes(dir / "out.safetensors");
  EXPECT_EQ(want.size(), tensors);
  EXPECT_TRUE(want.contains(among)) << among;
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(got.contains(name)) << name;
    EXPECT_TRUE(got.at(name) == bytes) << name << " changed";
  }
}

}  // namespace fsdpgen::test
