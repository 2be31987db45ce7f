// muon_math: Muon's per-element rules and constants, one definition for the
// CPU optimizer (runtime/cpu/muon.cpp), its CUDA twin and the planner (which
// sizes the workspace). torch.optim.Muon's definitions (torch/optim/_muon.py).
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/host_device.h"

// The quintic Newton-Schulz iteration's coefficients (Keller Jordan's, torch's
// defaults): X <- a X + (b A + c A A) X with A = X X^T.
inline constexpr float kMuonNsA = 3.4445f;
inline constexpr float kMuonNsB = -4.7750f;
inline constexpr float kMuonNsC = 2.0315f;
// The Frobenius norm that the iteration's input is divided by is clamped to
// at least this (a zero matrix stays zero).
inline constexpr float kMuonEps = 1e-7f;

// How the learning rate scales with the matrix's shape (torch's adjust_lr_fn),
// fan_out and fan_in as torch's nn.Linear weight (out_features, in_features):
// original: sqrt(max(1, fan_out / fan_in)) (Keller Jordan's);
// match_rms_adamw: 0.2 sqrt(max(fan_out, fan_in)) (Moonshot's, so that AdamW's
// learning rate and weight decay carry over).
enum class muon_adjust : int { original, match_rms_adamw };

// In double, as torch computes it in Python; the caller rounds the product once.
inline double muon_adjusted_lr(double lr, muon_adjust rule, int64_t fan_out, int64_t fan_in) {
  const double out = static_cast<double>(fan_out), in = static_cast<double>(fan_in);
  if (rule == muon_adjust::original) return lr * std::sqrt(out / in > 1.0 ? out / in : 1.0);
  return lr * 0.2 * std::sqrt(out > in ? out : in);
}

// torch.lerp on fp32 (ATen's Lerp.h): self + w (end - self) for |w| < 0.5, else
// end - (end - self) (1 - w), with w the weight rounded to fp32.
FSDPGEN_HOST_DEVICE float muon_lerp(float self, float end, float w) {
  return (w < 0.5f && w > -0.5f) ? self + w * (end - self) : end - (end - self) * (1.0f - w);
}

// One element's momentum step; returns the Newton-Schulz input. torch's
// buf.lerp_(g, 1 - momentum), then g.lerp(buf, momentum) with nesterov, else
// buf. w_buf = float(1 - momentum) and w_nesterov = float(momentum), the
// rounding torch does (1 - momentum in double, then to fp32).
FSDPGEN_HOST_DEVICE float muon_momentum(float& buf, float g, float w_buf, float w_nesterov,
                                        bool nesterov) {
  const float b = muon_lerp(buf, g, w_buf);
  buf = b;
  return nesterov ? muon_lerp(g, b, w_nesterov) : b;
}

// One element's update on the shard that holds it: decoupled weight decay by
// the unadjusted lr (decay = float(1 - lr * weight_decay)), then the
// orthogonalized update scaled by the adjusted lr, as torch's
// param.mul_(1 - lr * wd); param.add_(update, alpha=-adjusted_lr).
FSDPGEN_HOST_DEVICE void muon_apply_update(float& master, float update, float decay,
                                           float adjusted_lr) {
  master = master * decay - adjusted_lr * update;
}

// Floats of workspace muon_orthogonalize (runtime/cpu/muon.h) needs for a
// (rows, cols) matrix, with m = min(rows, cols) and n = max: two iterates
// X (m, n) (the iteration is not in place), the Gram matrix A (m, m) and
// b A + c A A (m, m). The same for fp32 and bf16 iterates (bf16 values are
// kept in fp32 storage on the CPU).
FSDPGEN_HOST_DEVICE int64_t muon_workspace_floats(int64_t rows, int64_t cols) {
  const int64_t m = rows < cols ? rows : cols, n = rows < cols ? cols : rows;
  return 2 * m * n + 2 * m * m;
}
inline int64_t muon_workspace_bytes(int64_t rows, int64_t cols) {
  return muon_workspace_floats(rows, cols) * static_cast<int64_t>(sizeof(float));
}

// How Newton-Schulz runs on a (rows, cols) matrix, the CPU's and the
// device's alike: a tall one as its transpose (torch's .T), so that the Gram
// matrix is the smaller (m, m) one; the workspace (muon_workspace_floats)
// holds the iterates x and xn (m, n), then a and b (m, m).
struct muon_ns_shape {
  bool tall = false;
  int64_t m = 0, n = 0;
  float *x = nullptr, *xn = nullptr, *a = nullptr, *b = nullptr;
};
inline muon_ns_shape muon_ns_shape_of(int64_t rows, int64_t cols, void* workspace) {
  muon_ns_shape s;
  s.tall = rows > cols;
  s.m = s.tall ? cols : rows;
  s.n = s.tall ? rows : cols;
  s.x = static_cast<float*>(workspace);
  s.xn = s.x + s.m * s.n;
  s.a = s.xn + s.m * s.n;
  s.b = s.a + s.m * s.m;
  return s;
}
