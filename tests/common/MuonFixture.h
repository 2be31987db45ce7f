// MuonFixture: tools/muon_reference.py's fixture of torch.optim.Muon
// (tests/data/muon_reference.safetensors) as the Muon tests read it, the
// errors they measure, and the tolerances the CPU meets against it
// (tests/runtime/MuonTest.cpp measures them; tests/cuda/CudaMuonTest.cpp
// allows the device a margin over them).
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/muon.h"
#include "runtime/files/safetensors.h"

namespace muon_fixture {

// Tolerances, as max |w - w_torch| over the largest |w_torch - w0| of the
// matrix (how far its weights have moved so far: stricter than relative to
// the weights), and max |b - b_torch| over max |b_torch| for the momentum.
// Measured on x86-64 with OpenBLAS's Prescott, Nehalem, Haswell, SkylakeX
// and Zen kernels (OPENBLAS_CORETYPE), worst over steps and matrices:
// fp32 iterates against torch's iteration in fp64: 1.3e-6 to 1.6e-6, fp32
// rounding of five iterations (the worst at step 1, when the weights have
// moved least).
constexpr double kFp32Tol = 5e-6;
// The momentum is fp32 in both, the same lerp: measured 0 (bit for bit).
constexpr double kMomentumTol = 1e-6;
// bf16 iterates against torch's bf16 as shipped: 1.0e-6 on every kernel (the
// products of these small matrices round to the same bf16 values as torch's
// oneDNN GEMMs). The tolerance leaves room for a few elements rounding to the
// neighbouring bf16 value where larger sums are ordered differently; leaving
// out one of the roundings (the Gram matrix's) misses by 2.7e-2.
constexpr double kBf16Tol = 2e-3;
// A bf16 run is this far at least from the fp64 reference, and an fp32 run
// from torch's bf16 one (both measured 5.6e-2), so kBf16Tol tells a bf16
// emulation from an fp32 one.
constexpr double kBf16Gap = 2e-2;

inline std::string fixture_path() {
  return std::string(FSDPGEN_SOURCE_DIR) + "/tests/data/muon_reference.safetensors";
}

struct fixture_matrix {
  std::string name;
  int64_t rows, cols;
};

struct fixture_config {
  std::string name;
  bool nesterov;
  muon_adjust adjust;
  dtype_id ns_dtype;  // fp32 stands for the fixture's fp64 iteration
};

struct fixture {
  safetensors_file file;
  std::vector<fixture_matrix> matrices;
  std::vector<fixture_config> configs;
  int steps = 0;
  double lr = 0, momentum = 0, weight_decay = 0;
  int ns_steps = 0;
  nlohmann::json coefficients;
  double eps = 0;

  std::vector<float> tensor(const std::string& name) const {
    const safetensors_tensor* t = file.find(name);
    if (t == nullptr) throw std::runtime_error(file.path + ": no tensor " + name);
    std::vector<float> out(static_cast<size_t>(t->elems()));
    safetensors_read(file, *t, 0, t->elems(), out.data());
    return out;
  }
  const fixture_config& config(const std::string& name) const {
    for (const fixture_config& c : configs)
      if (c.name == name) return c;
    throw std::runtime_error(file.path + ": no configuration " + name);
  }
  muon_settings settings(const fixture_config& c) const {
    muon_settings s;
    s.lr = lr;
    s.momentum = momentum;
    s.weight_decay = weight_decay;
    s.ns_steps = ns_steps;
    s.nesterov = c.nesterov;
    s.adjust = c.adjust;
    s.ns_dtype = c.ns_dtype;
    return s;
  }
};

inline const fixture& reference() {
  static const fixture f = [] {
    fixture r;
    r.file = safetensors_open(fixture_path());
    const auto& md = r.file.metadata;
    for (const auto& m : nlohmann::json::parse(md.at("matrices")))
      r.matrices.push_back({m[0].get<std::string>(), m[1].get<int64_t>(), m[2].get<int64_t>()});
    for (const auto& c : nlohmann::json::parse(md.at("configs")))
      r.configs.push_back(
          {c["name"].get<std::string>(), c["nesterov"].get<bool>(),
           c["adjust_lr_fn"] == "original" ? muon_adjust::original : muon_adjust::match_rms_adamw,
           c["ns"] == "bf16" ? dtype_id::bf16 : dtype_id::fp32});
    r.steps = std::stoi(md.at("steps"));
    r.lr = std::stod(md.at("lr"));
    r.momentum = std::stod(md.at("momentum"));
    r.weight_decay = std::stod(md.at("weight_decay"));
    r.ns_steps = std::stoi(md.at("ns_steps"));
    r.coefficients = nlohmann::json::parse(md.at("ns_coefficients"));
    r.eps = std::stod(md.at("eps"));
    return r;
  }();
  return f;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}
inline double max_abs(const std::vector<float>& a) {
  double d = 0;
  for (float v : a)
    d = std::max(d, std::fabs(static_cast<double>(v)));
  return d;
}

}  // namespace muon_fixture
