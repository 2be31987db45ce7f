// MuonTest: runtime/cpu/muon.h against torch.optim.Muon, through the fixture that
// tools/muon_reference.py writes (tests/data/muon_reference.safetensors):
// fp32 Newton-Schulz against torch's iteration in fp64, bf16 against torch as
// shipped; runs with one setting flipped (nesterov, the adjust rule, the
// orientation of a tall matrix) must miss the fixture by far more than the
// tolerance; plus the algebra the FSDP path relies on (per-slice apply,
// transposition, gradient dtype and scale) and the located errors.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cpu/muon.h"
#include "runtime/files/safetensors.h"
#include "tests/common/ExpectError.h"
#include "tests/common/MuonFixture.h"

namespace {

using namespace muon_fixture;

// A flipped setting misses the fixture by at least this factor times kFp32Tol.
constexpr double kMissFactor = 100;

// The worst errors of a run over every step and matrix (see the tolerances).
struct run_error {
  double weights = 0, momentum = 0;
  std::string worst;  // where the weights' worst error is
};

// Steps every fixture matrix with muon_step under `s` (oriented as stored
// unless transposed names one stored as (in, out)) and compares each step's
// weights with configuration `expected` and the momentum with the fixture's.
run_error run_against(const fixture& f, const muon_settings& s, const std::string& expected,
                      const std::string& only = "", const std::string& transposed = "") {
  run_error e;
  for (const fixture_matrix& fm : f.matrices) {
    if (!only.empty() && fm.name != only) continue;
    const muon_matrix m{fm.rows, fm.cols, fm.name == transposed};
    const std::vector<float> w0 = f.tensor(fm.name + ".w0");
    std::vector<float> w = w0, momentum(w.size(), 0.0f), update(w.size());
    std::vector<float> ws(static_cast<size_t>(muon_workspace_floats(m.rows, m.cols)));
    for (int t = 1; t <= f.steps; ++t) {
      const std::string step = std::to_string(t);
      const std::vector<float> grad = f.tensor(fm.name + ".grad." + step);
      muon_step(m, s, w.data(), momentum.data(), grad.data(), dtype_id::fp32, 1.0f, update.data(),
                ws.data(), static_cast<int64_t>(ws.size() * sizeof(float)));
      std::vector<float> want = f.tensor(expected + "." + fm.name + ".w." + step);
      std::vector<float> moved = want;
      for (size_t i = 0; i < moved.size(); ++i)
        moved[i] -= w0[i];
      const double we = max_abs_diff(w, want) / max_abs(moved);
      if (we > e.weights) {
        e.weights = we;
        e.worst = fm.name + " step " + step;
      }
      const std::vector<float> want_b = f.tensor(fm.name + ".momentum." + step);
      e.momentum = std::max(e.momentum, max_abs_diff(momentum, want_b) / max_abs(want_b));
    }
  }
  std::printf("  against %s: weights %.3g (worst: %s), momentum %.3g\n", expected.c_str(),
              e.weights, e.worst.c_str(), e.momentum);
  return e;
}

// ---------------------------------------------------------------- the fixture

// The fixture was made with torch's defaults; they must be muon_math.h's.
TEST(Muon, FixtureUsesTheConstantsOfMuonMath) {
  const fixture& f = reference();
  EXPECT_EQ(f.coefficients.size(), 3u);
  EXPECT_EQ(static_cast<float>(f.coefficients[0].get<double>()), kMuonNsA);
  EXPECT_EQ(static_cast<float>(f.coefficients[1].get<double>()), kMuonNsB);
  EXPECT_EQ(static_cast<float>(f.coefficients[2].get<double>()), kMuonNsC);
  EXPECT_EQ(static_cast<float>(f.eps), kMuonEps);
  EXPECT_EQ(f.configs.size(), 3u);
  EXPECT_EQ(f.matrices.size(), 5u);
  bool tall = false, wide = false;
  for (const fixture_matrix& m : f.matrices) {
    tall |= m.rows > m.cols;
    wide |= m.rows < m.cols;
  }
  EXPECT_TRUE(tall && wide);
}

// fp32 iterates against torch.optim.Muon with its iteration in fp64.
TEST(Muon, Fp32MatchesTorchWithFp64NewtonSchulz) {
  const fixture& f = reference();
  for (const char* name : {"nesterov_original", "plain_match_rms"}) {
    SCOPED_TRACE(name);
    const run_error e = run_against(f, f.settings(f.config(name)), name);
    EXPECT_LE(e.weights, kFp32Tol) << e.worst;
    EXPECT_LE(e.momentum, kMomentumTol);
  }
}

// bf16 iterates against torch.optim.Muon as shipped, and measurably closer to
// it than to the fp64 iteration (the rounding is torch's, not just any).
TEST(Muon, Bf16MatchesTorchAsShipped) {
  const fixture& f = reference();
  const muon_settings s = f.settings(f.config("nesterov_original_bf16"));
  const run_error e = run_against(f, s, "nesterov_original_bf16");
  EXPECT_LE(e.weights, kBf16Tol) << e.worst;
  EXPECT_LE(e.momentum, kMomentumTol);
  EXPECT_GE(run_against(f, s, "nesterov_original").weights, kBf16Gap);
  muon_settings fp32 = s;
  fp32.ns_dtype = dtype_id::fp32;
  EXPECT_GE(run_against(f, fp32, "nesterov_original_bf16").weights, kBf16Gap);
}

// ---------------------------------------------------------------- flipped settings

TEST(Muon, NesterovOffMissesTheFixture) {
  const fixture& f = reference();
  muon_settings s = f.settings(f.config("nesterov_original"));
  s.nesterov = false;
  EXPECT_GE(run_against(f, s, "nesterov_original").weights, kMissFactor * kFp32Tol);
  s = f.settings(f.config("plain_match_rms"));
  s.nesterov = true;
  EXPECT_GE(run_against(f, s, "plain_match_rms").weights, kMissFactor * kFp32Tol);
}

TEST(Muon, WrongAdjustRuleMissesTheFixture) {
  const fixture& f = reference();
  muon_settings s = f.settings(f.config("nesterov_original"));
  s.adjust = muon_adjust::match_rms_adamw;
  EXPECT_GE(run_against(f, s, "nesterov_original").weights, kMissFactor * kFp32Tol);
  s = f.settings(f.config("plain_match_rms"));
  s.adjust = muon_adjust::original;
  EXPECT_GE(run_against(f, s, "plain_match_rms").weights, kMissFactor * kFp32Tol);
}

// 'original' scales a tall (out > in) matrix by sqrt(out / in) and leaves a
// wide one alone: reading a tall matrix's orientation the wrong way round
// (as if stored (in, out)) misses; the same mistake on a square one does not.
TEST(Muon, TallMatrixReadTheWrongWayRoundMissesTheFixture) {
  const fixture& f = reference();
  const muon_settings s = f.settings(f.config("nesterov_original"));
  EXPECT_LE(run_against(f, s, "nesterov_original", "tall").weights, kFp32Tol);
  EXPECT_GE(run_against(f, s, "nesterov_original", "tall", "tall").weights, kMissFactor * kFp32Tol);
  EXPECT_LE(run_against(f, s, "nesterov_original", "square", "square").weights, kFp32Tol);
}

// ---------------------------------------------------------------- algebra

std::vector<float> ramp_matrix(int64_t rows, int64_t cols, int seed) {
  std::vector<float> g(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < g.size(); ++i)
    g[i] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(seed)) *
           (1.0f + 0.01f * static_cast<float>(i % 7));
  return g;
}

std::vector<float> orthogonalize(const muon_matrix& m, const muon_settings& s,
                                 const std::vector<float>& grad) {
  std::vector<float> momentum(grad.size(), 0.0f), update(grad.size());
  std::vector<float> ws(static_cast<size_t>(muon_workspace_floats(m.rows, m.cols)));
  muon_orthogonalize(m, s, momentum.data(), grad.data(), dtype_id::fp32, 1.0f, update.data(),
                     ws.data(), static_cast<int64_t>(ws.size() * sizeof(float)));
  return update;
}

// The iteration commutes with transposition: a tall matrix's update is the
// transpose of its transpose's (a missing or doubled transpose back would
// scramble it), and X X^T of the update is near the identity's scale.
TEST(Muon, TallUpdateIsTheTransposeOfTheWideOne) {
  const int64_t rows = 40, cols = 12;
  const std::vector<float> g = ramp_matrix(rows, cols, 3);
  std::vector<float> gt(g.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      gt[c * rows + r] = g[r * cols + c];
  const muon_settings s;
  const std::vector<float> tall = orthogonalize({rows, cols}, s, g);
  const std::vector<float> wide = orthogonalize({cols, rows}, s, gt);
  double d = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      d = std::max(d, std::fabs(static_cast<double>(tall[r * cols + c]) - wide[c * rows + r]));
  EXPECT_LE(d, 1e-6);
  // Columns of the tall update are near-orthonormal: the quintic leaves
  // singular values in ~[0.7, 1.2], so each column's norm lies there too.
  for (int64_t c = 0; c < cols; ++c) {
    double n = 0;
    for (int64_t r = 0; r < rows; ++r)
      n += tall[r * cols + c] * tall[r * cols + c];
    EXPECT_GT(std::sqrt(n), 0.5) << "column " << c;
    EXPECT_LT(std::sqrt(n), 1.5) << "column " << c;
  }
}

// The FSDP path: the owner orthogonalizes, each shard holder applies its own
// slice; slices cut anywhere give the whole-matrix step bit for bit.
TEST(Muon, ApplyingSlicesEqualsTheWholeStep) {
  const muon_matrix m{24, 8};
  muon_settings s;
  s.weight_decay = 0.1;
  const std::vector<float> g = ramp_matrix(m.rows, m.cols, 1);
  std::vector<float> whole = ramp_matrix(m.rows, m.cols, 2), momentum(g.size(), 0.0f);
  std::vector<float> update(g.size()), ws(static_cast<size_t>(muon_workspace_floats(24, 8)));
  std::vector<float> sliced = whole, momentum2 = momentum;
  const int64_t ws_bytes = static_cast<int64_t>(ws.size() * sizeof(float));
  muon_step(m, s, whole.data(), momentum.data(), g.data(), dtype_id::fp32, 1.0f, update.data(),
            ws.data(), ws_bytes);
  muon_orthogonalize(m, s, momentum2.data(), g.data(), dtype_id::fp32, 1.0f, update.data(),
                     ws.data(), ws_bytes);
  const muon_scale k = muon_scale_of(m, s);
  for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 77}, {77, 192}})
    muon_apply(sliced.data() + begin, update.data() + begin, end - begin, k);
  EXPECT_EQ(sliced, whole);
  EXPECT_EQ(momentum2, momentum);
}

// A bf16 gradient is read as its fp32 value, and grad_scale (the clip factor)
// multiplies it before the momentum: both exactly.
TEST(Muon, GradientDtypeAndScale) {
  const muon_matrix m{8, 24};
  const muon_settings s;
  std::vector<float> g = ramp_matrix(m.rows, m.cols, 4);
  std::vector<bf16> g16(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    g16[i] = bf16_from_float(g[i]);
    g[i] = bf16_to_float(g16[i]);
  }
  std::vector<float> half = g;
  for (float& v : half)
    v *= 0.5f;
  std::vector<float> ws(static_cast<size_t>(muon_workspace_floats(m.rows, m.cols)));
  const int64_t ws_bytes = static_cast<int64_t>(ws.size() * sizeof(float));
  auto run = [&](const void* grad, dtype_id d, float scale) {
    std::vector<float> momentum(g.size(), 0.25f), update(g.size());
    muon_orthogonalize(m, s, momentum.data(), grad, d, scale, update.data(), ws.data(), ws_bytes);
    update.insert(update.end(), momentum.begin(), momentum.end());
    return update;
  };
  const std::vector<float> want = run(g.data(), dtype_id::fp32, 1.0f);
  EXPECT_EQ(run(g16.data(), dtype_id::bf16, 1.0f), want);
  EXPECT_EQ(run(half.data(), dtype_id::fp32, 2.0f), want);
  EXPECT_NE(run(g.data(), dtype_id::fp32, 2.0f), want);
}

// A zero gradient and momentum: the norm clamps to eps, the update is zero,
// and the weights only decay (torch gives the same, not NaN).
TEST(Muon, ZeroGradientOnlyDecays) {
  const muon_matrix m{3, 7};
  muon_settings s;
  s.weight_decay = 0.5;
  const std::vector<float> g(21, 0.0f);
  std::vector<float> w(21, 2.0f), momentum(21, 0.0f), update(21, 1.0f);
  std::vector<float> ws(static_cast<size_t>(muon_workspace_floats(3, 7)));
  for (dtype_id d : {dtype_id::fp32, dtype_id::bf16}) {
    s.ns_dtype = d;
    std::fill(w.begin(), w.end(), 2.0f);
    muon_step(m, s, w.data(), momentum.data(), g.data(), dtype_id::fp32, 1.0f, update.data(),
              ws.data(), static_cast<int64_t>(ws.size() * sizeof(float)));
    for (float u : update)
      EXPECT_EQ(u, 0.0f);
    for (float v : w)
      EXPECT_EQ(v, 2.0f * static_cast<float>(1.0 - 0.02 * 0.5));
  }
}

// Both rules by hand, and the orientation each reads.
TEST(Muon, AdjustedLearningRates) {
  EXPECT_DOUBLE_EQ(muon_adjusted_lr(0.02, muon_adjust::original, 96, 32), 0.02 * std::sqrt(3.0));
  EXPECT_DOUBLE_EQ(muon_adjusted_lr(0.02, muon_adjust::original, 32, 96), 0.02);
  EXPECT_DOUBLE_EQ(muon_adjusted_lr(0.02, muon_adjust::match_rms_adamw, 32, 96),
                   0.02 * 0.2 * std::sqrt(96.0));
  EXPECT_DOUBLE_EQ(muon_adjusted_lr(0.02, muon_adjust::match_rms_adamw, 96, 32),
                   0.02 * 0.2 * std::sqrt(96.0));
  muon_settings s;
  const muon_matrix conv1d{32, 96, true};  // GPT-2's c_fc: (in, out) = (C, 4C)
  EXPECT_EQ(conv1d.fan_out(), 96);
  EXPECT_FLOAT_EQ(muon_scale_of(conv1d, s).adjusted_lr, static_cast<float>(0.02 * std::sqrt(3.0)));
}

// ---------------------------------------------------------------- errors

TEST(Muon, BadInputsNameTheProblem) {
  const muon_matrix m{8, 4};
  std::vector<float> buf(64, 0.0f), ws(static_cast<size_t>(muon_workspace_floats(8, 4)));
  const int64_t ws_bytes = static_cast<int64_t>(ws.size() * sizeof(float));
  auto call = [&](const muon_matrix& mm, const muon_settings& s, int64_t bytes) {
    muon_orthogonalize(mm, s, buf.data(), buf.data(), dtype_id::fp32, 1.0f, buf.data(), ws.data(),
                       bytes);
  };
  expect_error([&] { call(m, {}, ws_bytes - 4); },
               {"workspace of " + std::to_string(ws_bytes - 4) + " bytes", "(8, 4)",
                std::to_string(ws_bytes)});
  expect_error([&] { call({0, 4}, {}, ws_bytes); }, {"shape (0, 4)", "positive"});
  muon_settings s;
  s.ns_dtype = dtype_id::fp16;
  expect_error([&] { call(m, s, ws_bytes); }, {"ns_dtype fp16", "fp32 or bf16"});
  s = {};
  s.ns_steps = 100;
  expect_error([&] { call(m, s, ws_bytes); }, {"ns_steps 100", "0 to 99"});
}

}  // namespace
