// muon: momentum, Newton-Schulz orthogonalization through the runtime's
// GEMM, and the update of a matrix's elements.
#include "runtime/cpu/muon.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>

#include "runtime/cpu/gemm.h"

namespace {

// Elementwise loops run on OpenMP threads only when long enough to pay.
constexpr int64_t kMuonParallelElems = 65536;

float round_bf16(float x) {
  return bf16_to_float(bf16_from_float(x));
}

// Rounds x[0, n) to bf16 values in place: what torch stores after each bf16 op.
void round_all_bf16(float* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kMuonParallelElems)
  for (int64_t i = 0; i < n; ++i)
    x[i] = round_bf16(x[i]);
}

void check(const muon_matrix& m, const muon_settings& s, int64_t workspace_bytes) {
  if (m.rows <= 0 || m.cols <= 0)
    throw std::runtime_error(
        fmt::format("muon: matrix of shape ({}, {}): both sides must be positive", m.rows, m.cols));
  if (s.ns_steps < 0 || s.ns_steps >= 100)
    throw std::runtime_error(fmt::format(
        "muon: ns_steps {} is out of range (0 to 99, as torch.optim.Muon allows)", s.ns_steps));
  if (s.ns_dtype != dtype_id::fp32 && s.ns_dtype != dtype_id::bf16)
    throw std::runtime_error(
        fmt::format("muon: ns_dtype {} is not supported (fp32 or bf16)", dtype_name(s.ns_dtype)));
  const int64_t need = muon_workspace_bytes(m.rows, m.cols);
  if (workspace_bytes < need)
    throw std::runtime_error(
        fmt::format("muon: workspace of {} bytes is too small for a ({}, {}) matrix, which needs "
                    "{} (muon_workspace_bytes)",
                    workspace_bytes, m.rows, m.cols, need));
}

// x (m, n) divided by its Frobenius norm, clamped to kMuonEps. bf16: the norm
// (accumulated wide) and each quotient rounded to bf16, as torch's
// ortho_grad.div_(ortho_grad.norm().clamp(min=eps)) on a bf16 tensor.
void ns_normalize(float* x, int64_t elems, bool bf16) {
  double sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum) if (elems > kMuonParallelElems)
  for (int64_t i = 0; i < elems; ++i)
    sum += static_cast<double>(x[i]) * x[i];
  float norm = static_cast<float>(std::sqrt(sum));
  if (bf16) norm = round_bf16(norm);
  norm = norm > kMuonEps ? norm : kMuonEps;
  if (bf16) norm = round_bf16(norm);
#pragma omp parallel for schedule(static) if (elems > kMuonParallelElems)
  for (int64_t i = 0; i < elems; ++i)
    x[i] = bf16 ? round_bf16(x[i] / norm) : x[i] / norm;
}

// ns_steps iterations on x (m, n), m <= n, normalized: A = X X^T,
// B = b A + c A A, X <- a X + B X, each product one GEMM whose result is
// rounded to bf16 once when bf16 (torch's bf16 matmul and addmm accumulate in
// fp32 and round the output). Returns the buffer holding the result (x or xn).
float* ns_iterate(float* x, float* xn, float* a, float* b, int64_t m, int64_t n, int steps,
                  bool bf16) {
  const gemm_workspace fp32_gemm;  // fp32 operands need none
  for (int it = 0; it < steps; ++it) {
    gemm(false, true, m, m, n, 1.0f, x, n, x, n, 0.0f, a, m, fp32_gemm);
    if (bf16) round_all_bf16(a, m * m);
    std::copy(a, a + m * m, b);
    gemm(false, false, m, m, m, kMuonNsC, a, m, a, m, kMuonNsB, b, m, fp32_gemm);
    if (bf16) round_all_bf16(b, m * m);
    std::copy(x, x + m * n, xn);
    gemm(false, false, m, n, m, 1.0f, b, m, x, n, kMuonNsA, xn, n, fp32_gemm);
    if (bf16) round_all_bf16(xn, m * n);
    std::swap(x, xn);
  }
  return x;
}

}  // namespace

void muon_orthogonalize(const muon_matrix& mat, const muon_settings& s, float* momentum,
                        const void* grad, dtype_id g, float grad_scale, float* update,
                        void* workspace, int64_t workspace_bytes) {
  check(mat, s, workspace_bytes);
  const int64_t rows = mat.rows, cols = mat.cols;
  const auto [tall, m, n, x, xn, a, b] = muon_ns_shape_of(rows, cols, workspace);
  const bool bf16 = s.ns_dtype == dtype_id::bf16;
  const float w_buf = static_cast<float>(1.0 - s.momentum);
  const float w_nesterov = static_cast<float>(s.momentum);
  // The momentum step writes the iteration's input straight into x, in
  // x's (m, n) layout; bf16 rounds it as torch's grad.to(bfloat16).
#pragma omp parallel for schedule(static) if (rows * cols > kMuonParallelElems)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      const float in = muon_momentum(momentum[i], dtype_load(grad, g, i) * grad_scale, w_buf,
                                     w_nesterov, s.nesterov);
      x[tall ? c * rows + r : i] = bf16 ? round_bf16(in) : in;
    }
  ns_normalize(x, m * n, bf16);
  const float* out = ns_iterate(x, xn, a, b, m, n, s.ns_steps, bf16);
#pragma omp parallel for schedule(static) if (rows * cols > kMuonParallelElems)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      update[r * cols + c] = out[tall ? c * rows + r : r * cols + c];
}

muon_scale muon_scale_of(const muon_matrix& m, const muon_settings& s) {
  const double adjusted = muon_adjusted_lr(s.lr, s.adjust, m.fan_out(), m.fan_in());
  return {static_cast<float>(1.0 - s.lr * s.weight_decay), static_cast<float>(adjusted)};
}

void muon_apply(float* master, const float* update, int64_t elems, const muon_scale& k) {
#pragma omp parallel for schedule(static) if (elems > kMuonParallelElems)
  for (int64_t i = 0; i < elems; ++i)
    muon_apply_update(master[i], update[i], k.decay, k.adjusted_lr);
}

void muon_step(const muon_matrix& m, const muon_settings& s, float* master, float* momentum,
               const void* grad, dtype_id g, float grad_scale, float* update, void* workspace,
               int64_t workspace_bytes) {
  muon_orthogonalize(m, s, momentum, grad, g, grad_scale, update, workspace, workspace_bytes);
  muon_apply(master, update, m.elems(), muon_scale_of(m, s));
}
