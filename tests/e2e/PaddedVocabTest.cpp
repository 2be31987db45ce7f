// PaddedVocab: the padded vocabulary (model { pad_vocab_to }) is invisible
// from outside a run: a padded binary trains with the unpadded one's losses
// and gradient norms, writes the same Hugging Face file, checkpoints with the
// true shapes and zero padded rows, and checkpoints resume across the two.
#include "tests/e2e/E2e.h"

namespace fsdpgen::test {
namespace {

namespace fs = std::filesystem;

// Tolerances, padded against unpadded (fp32). The runs are not bit-identical
// after step 1: OpenBLAS rounds some sums of the Vp-wide head GEMMs
// differently from the V-wide ones (a few fp32 ulps, measured in
// Gpt2Head.PaddedVocabEqualsUnpadded; step 1's loss and norm come out equal),
// and AdamW, which scales each weight's step by its gradient's running
// magnitude, carries those ulps into the weights, most for weights whose
// gradients nearly cancel. Losses: relative 1e-6 (the bound; measured
// at most 1.5e-7 over these runs). Gradient norms: relative 1e-4 (measured
// at most 5.3e-6, hybrid step 4). Saved weights: absolute 5e-4 (measured at
// most 7.7e-5; AdamW moves a weight by ~lr = 1e-2 per step). A padded column
// in the softmax moves the first loss by ~log(Vp / V) ~ 1e-1, a gradient
// reaching the padded rows moves the norm from step 2 on.
constexpr double kLossRelTol = 1e-6, kNormRelTol = 1e-4, kWeightAtol = 5e-4;

E2eConfig padded(E2eConfig c, int vocab) {
  c.vocab = vocab;
  c.pad_vocab_to = 128;
  return c;
}

E2eConfig unpadded(E2eConfig c, int vocab) {
  c.vocab = vocab;
  c.pad_vocab_to = 1;
  return c;
}

// A binary for c in a directory of its own (shared by this file's tests).
fs::path binary_of(const E2eConfig& c) {
  return shared_binary(e2e_dir("padvocab_bin_" + c.name()), c.spec());
}

// A test's own work directory, emptied.
fs::path work(const std::string& name) {
  fs::path d = fs::path(FSDPGEN_E2E_WORK) / ("padvocab_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

CmdResult train(const E2eConfig& c, const fs::path& bin, const std::string& args) {
  CmdResult r = run_binary(c.world, bin, args);
  EXPECT_EQ(r.status, 0) << r.out;
  return r;
}

void expect_rel_close(double got, double want, double tol, const std::string& what) {
  const double rel = std::abs(got - want) / std::max(std::abs(want), 1e-30);
  std::printf("%s: padded %.9g, unpadded %.9g, relative difference %.2e\n", what.c_str(), got, want,
              rel);
  EXPECT_LE(rel, tol) << what;
}

double tolerance_of(const std::string& key) {
  return key == "loss" ? kLossRelTol : kNormRelTol;
}

// Every step's loss and gradient norm within their tolerances.
void expect_same_metrics(const fs::path& got, const fs::path& want, const std::string& what) {
  const std::vector<nlohmann::json> a = read_metrics(got), b = read_metrics(want);
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_FALSE(a.empty()) << what;
  for (size_t s = 0; s < a.size(); ++s)
    for (const char* key : {"loss", "grad_norm"})
      expect_rel_close(a[s].at(key).get<double>(), b[s].at(key).get<double>(), tolerance_of(key),
                       fmt::format("{} step {} {}", what, s + 1, key));
}

// The padded and unpadded binaries of one model train from the same init with
// the same losses and norms, and --save writes the same file: the header
// (names, true shapes, offsets) byte for byte, the weights within kWeightAtol.
void expect_same_saved_weights(const fs::path& got, const fs::path& want) {
  const std::string a = file_bytes(got), b = file_bytes(want);
  ASSERT_GE(b.size(), 8u) << want;
  ASSERT_EQ(a.size(), b.size()) << "the saved files' sizes";
  uint64_t header = 0;
  std::memcpy(&header, b.data(), 8);
  ASSERT_LE(8 + header, b.size());
  EXPECT_EQ(a.substr(0, 8 + header), b.substr(0, 8 + header)) << "the safetensors headers";
  const size_t n = (b.size() - 8 - header) / 4;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    float x = 0, y = 0;
    std::memcpy(&x, a.data() + 8 + header + 4 * i, 4);
    std::memcpy(&y, b.data() + 8 + header + 4 * i, 4);
    worst = std::max(worst, std::abs(static_cast<double>(x) - y));
  }
  std::printf("saved weights: %zu values, max |padded - unpadded| %.3g (tolerance %.0e)\n", n,
              worst, kWeightAtol);
  EXPECT_LE(worst, kWeightAtol);
}

// zero_elems: how the padded binary counts the padded rows' elements.
void expect_padded_equals_unpadded(const std::string& name, const E2eConfig& c, int vocab,
                                   const std::string& zero_elems) {
  const E2eConfig p = padded(c, vocab), u = unpadded(c, vocab);
  const fs::path w = work(name);
  CmdResult rp = train(p, binary_of(p),
                       fmt::format("--metrics {} --save {}", (w / "padded.jsonl").string(),
                                   (w / "padded.safetensors").string()));
  CmdResult ru = train(u, binary_of(u),
                       fmt::format("--metrics {} --save {}", (w / "unpadded.jsonl").string(),
                                   (w / "unpadded.safetensors").string()));
  EXPECT_NE(rp.out.find(fmt::format("vocab {} stored padded to 128 rows: {} zero elements", vocab,
                                    zero_elems)),
            std::string::npos)
      << rp.out;
  EXPECT_EQ(ru.out.find("stored padded"), std::string::npos) << ru.out;
  expect_same_metrics(w / "padded.jsonl", w / "unpadded.jsonl", name);
  expect_same_saved_weights(w / "padded.safetensors", w / "unpadded.safetensors");
  const std::string b = file_bytes(w / "unpadded.safetensors");
  EXPECT_NE(b.find(fmt::format("\"transformer.wte.weight\":{{\"dtype\":\"F32\",\"shape\":[{},32]",
                               vocab)),
            std::string::npos)
      << b.substr(0, 400);
}

// Sharded over a world of 2, vocab 100 stored as 128 rows, tied head.
TEST(PaddedVocab, FullShardWorld2EqualsUnpadded) {
  expect_padded_equals_unpadded("full_shard", E2eConfig{}, 100, "896");  // 28 rows x 32
}

// Hybrid (shard groups of 2, 2 replicas), untied head: both the embedding and
// lm_head are padded, vocab 64 stored as 128 rows.
TEST(PaddedVocab, HybridUntiedEqualsUnpadded) {
  E2eConfig c;
  c.sharding = "hybrid_shard";
  c.world = 4;
  c.shard_group = 2;
  c.micro_batch = 1;
  c.tied = false;
  expect_padded_equals_unpadded("hybrid", c, 64, "4,096");  // 2 x 64 rows x 32
}

// Element `i` of unit `unit`'s flat parameter in a checkpoint: its fp32
// weight and optimizer state planes (read from the shard files).
std::vector<float> checkpoint_values(const fs::path& ck, const nlohmann::json& m, int unit,
                                     int64_t i) {
  const int64_t shard_elems = m["units"][unit]["shard_elems"].get<int64_t>();
  const nlohmann::json& shard = m["shards"][static_cast<size_t>(i / shard_elems)];
  const std::string bytes = file_bytes(ck / shard["file"].get<std::string>());
  std::vector<float> out;
  for (const nlohmann::json& s : shard["sections"]) {
    if (s["unit"].get<int>() != unit) continue;
    const int64_t planes = s["bytes"].get<int64_t>() / (4 * shard_elems);
    for (int64_t k = 0; k < planes; ++k) {
      float v = 0;
      const int64_t at = s["offset"].get<int64_t>() + 4 * (k * shard_elems + i % shard_elems);
      std::memcpy(&v, bytes.data() + at, 4);
      out.push_back(v);
    }
  }
  return out;
}

// After training, a padded binary's checkpoint lists the true shapes, and the
// padded rows of the embedding stay zero in the weights and in AdamW's m and
// v (zero gradients keep them zero; weight decay of zero is zero), while the
// true rows moved.
TEST(PaddedVocab, CheckpointHasTrueShapesAndZeroPaddedRows) {
  const E2eConfig p = padded(E2eConfig{}, 100);
  const fs::path w = work("zero_rows");
  train(p, binary_of(p), fmt::format("--checkpoint-every 4 --checkpoint-dir {}", w.string()));
  const fs::path ck = w / "step_00000004";
  const nlohmann::json m = nlohmann::json::parse(file_bytes(ck / "manifest.json"));
  int64_t wte_offset = -1;
  for (const nlohmann::json& t : m["units"][0]["tensors"])
    if (t["name"] == "transformer.wte.weight") {
      EXPECT_EQ(t["shape"], nlohmann::json::array({100, 32}));
      wte_offset = t["offset"].get<int64_t>();
    }
  ASSERT_GE(wte_offset, 0) << m.dump();
  int64_t true_moved = 0;
  for (int64_t i = 0; i < 128 * 32; ++i) {
    const std::vector<float> v = checkpoint_values(ck, m, 0, wte_offset + i);
    ASSERT_EQ(v.size(), 3u) << "weights, m, v";
    if (i >= 100 * 32) {
      for (float x : v)
        ASSERT_EQ(x, 0.0f) << "padded row " << i / 32 << " column " << i % 32;
    } else {
      true_moved += v[1] != 0.0f;
    }
  }
  EXPECT_GT(true_moved, 100 * 32 / 2) << "AdamW's m of the true rows";
}

// A checkpoint written at step 2 by one binary resumes in the other (unpadded
// to padded and back): steps 3 and 4 give the uninterrupted run's losses.
TEST(PaddedVocab, CheckpointsResumeAcrossPaddedAndUnpadded) {
  const E2eConfig p = padded(E2eConfig{}, 100), u = unpadded(E2eConfig{}, 100);
  const fs::path w = work("resume");
  for (const auto& [from, to, name] :
       {std::tuple{u, p, "unpadded_to_padded"}, std::tuple{p, u, "padded_to_unpadded"}}) {
    const fs::path ck = w / (std::string(name) + "_ck");
    train(from, binary_of(from),
          fmt::format("--metrics {} --checkpoint-every 2 --checkpoint-keep 10 --checkpoint-dir {}",
                      (w / (std::string(name) + "_straight.jsonl")).string(), ck.string()));
    const fs::path resumed = w / (std::string(name) + "_resumed.jsonl");
    CmdResult r = train(
        to, binary_of(to),
        fmt::format("--resume {} --metrics {}", (ck / "step_00000002").string(), resumed.string()));
    EXPECT_NE(r.out.find("(step 2, 8 sequences read)"), std::string::npos) << r.out;
    const std::vector<nlohmann::json> straight =
        read_metrics(w / (std::string(name) + "_straight.jsonl"));
    const std::vector<nlohmann::json> rest = read_metrics(resumed);
    ASSERT_EQ(straight.size(), 4u) << name;
    ASSERT_EQ(rest.size(), 2u) << name;
    for (size_t s = 0; s < rest.size(); ++s)
      for (const char* key : {"loss", "grad_norm"})
        expect_rel_close(rest[s].at(key).get<double>(), straight[s + 2].at(key).get<double>(),
                         tolerance_of(key), fmt::format("{} step {} {}", name, s + 3, key));
  }
}

}  // namespace
}  // namespace fsdpgen::test
