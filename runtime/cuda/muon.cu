// muon (CUDA): the kernels of Muon's momentum step, normalisation and
// shard step, and the Newton-Schulz iteration as cuBLASLt GEMMs on them.
// The norm is one block's sum in double in a fixed order (as the CPU's,
// wide), so that runs repeat bit for bit.
#include <stdexcept>
#include <string>
#include <utility>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/grad_scaling.cuh"
#include "runtime/cuda/muon.h"
#include "runtime/optimizer_math.h"

namespace {

constexpr int kThreads = 256;
constexpr int kNormThreads = 1024;

__device__ float round_bf16(float x) {
  return bf16_to_float(bf16_from_float(x));
}

// The momentum step into the iterate x, in its (m, n) layout: transposed
// for a tall matrix; rounded to bf16 when the iteration is (torch's
// grad.to(bfloat16)). A skipped step leaves the momentum and writes zeros.
__global__ void momentum_kernel(float* x, float* momentum, const void* grad, dtype_id gt,
                                int64_t rows, int64_t cols, bool tall, float w_buf,
                                float w_nesterov, bool nesterov, bool bf16,
                                const gpu_step_scalars* s, double clip) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const int64_t to = tall ? c * rows + r : i;
  const grad_scaling gs = grad_scaling_of(s, clip);
  if (gs.skip) {
    x[to] = 0.0f;
    return;
  }
  const float in = muon_momentum(momentum[i], load_as_float(grad, gt, i) * gs.scale, w_buf,
                                 w_nesterov, nesterov);
  x[to] = bf16 ? round_bf16(in) : in;
}

// *norm = the Frobenius norm of x (n), clamped to kMuonEps, with the bf16
// roundings of torch's ortho_grad.norm().clamp(min=eps) on a bf16 tensor.
// One block: thread t sums x[t], x[t + blockDim.x], ... then a tree.
__global__ void norm_kernel(float* norm, const float* x, int64_t n, bool bf16) {
  __shared__ double partial[kNormThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc += static_cast<double>(x[i]) * x[i];
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float v = static_cast<float>(sqrt(partial[0]));
  if (bf16) v = round_bf16(v);
  v = v > kMuonEps ? v : kMuonEps;
  if (bf16) v = round_bf16(v);
  *norm = v;
}

__global__ void divide_kernel(float* x, int64_t n, const float* norm, bool bf16) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const float q = x[i] / *norm;
  x[i] = bf16 ? round_bf16(q) : q;
}

// What torch stores after each bf16 product: the fp32 result rounded.
__global__ void round_bf16_kernel(float* x, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] = round_bf16(x[i]);
}

// The iterate (m, n) back into the matrix's stored layout.
__global__ void write_update_kernel(float* update, const float* out, int64_t rows, int64_t cols,
                                    bool tall) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  update[i] = out[tall ? c * rows + r : i];
}

// The shard step: thread i finds its part (the last beginning at or before
// i) and applies Muon's update or AdamW to w[i].
__global__ void apply_kernel(const gpu_muon_part* parts, int count, int64_t n, float* w, float* m1,
                             float* m2, const void* grad, dtype_id gt, const float* update,
                             void* param, dtype_id param_t, gpu_muon_apply_args a,
                             const gpu_step_scalars* s) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const grad_scaling gs = grad_scaling_of(s, a.clip);
  if (!gs.skip) {
    int lo = 0, hi = count;  // the first part beginning after i
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (parts[mid].begin <= i)
        lo = mid + 1;
      else
        hi = mid;
    }
    const gpu_muon_part& part = parts[lo - 1];
    const double lr = s->lr;
    if (part.matrix < 0) {
      // As runtime/cpu/muon_step.cpp's muon_apply_shard and optimizer_adamw.
      const int64_t k = part.state_offset + (i - part.begin);
      const float lr_adamw = static_cast<float>(lr * a.adamw_lr_ratio);
      adamw_update(w[i], m1[k], m2[k], load_as_float(grad, gt, i) * gs.scale, lr_adamw,
                   a.adamw_beta1, a.adamw_beta2, 1.0f - powf(a.adamw_beta1, s->t),
                   1.0f - powf(a.adamw_beta2, s->t), a.adamw_eps,
                   part.decayed ? a.adamw_weight_decay : 0.0f);
    } else {
      // muon_scale_of's factors, from the step's lr.
      muon_apply_update(w[i], update[i], static_cast<float>(1.0 - lr * a.weight_decay),
                        static_cast<float>(lr * part.lr_factor));
    }
  }
  if (param) store_from_float(param, param_t, i, w[i]);
}

void check_launch() {
  CUDA_CHECK(cudaGetLastError());
}

dim3 blocks_for(int64_t n) {
  return grid_dim(ceil_div(n, kThreads));
}

std::string shape(const muon_matrix& m) {
  return "(" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + ")";
}

// As runtime/cpu/muon.cpp's checks (fmt stays out of nvcc's way: plain strings).
void check(const muon_matrix& m, const muon_settings& s, int64_t workspace_bytes) {
  if (m.rows <= 0 || m.cols <= 0)
    throw std::runtime_error("muon (CUDA): matrix of shape " + shape(m) +
                             ": both sides must be positive");
  if (s.ns_steps < 0 || s.ns_steps >= 100)
    throw std::runtime_error("muon (CUDA): ns_steps " + std::to_string(s.ns_steps) +
                             " is out of range (0 to 99, as torch.optim.Muon allows)");
  if (s.ns_dtype != dtype_id::fp32 && s.ns_dtype != dtype_id::bf16)
    throw std::runtime_error(std::string("muon (CUDA): ns_dtype ") + dtype_name(s.ns_dtype) +
                             " is not supported (fp32 or bf16)");
  const int64_t need = muon_workspace_bytes(m.rows, m.cols);
  if (workspace_bytes < need)
    throw std::runtime_error("muon (CUDA): workspace of " + std::to_string(workspace_bytes) +
                             " bytes is too small for a " + shape(m) + " matrix, which needs " +
                             std::to_string(need) + " (muon_workspace_bytes)");
}

void round_all_bf16(float* x, int64_t n, gpu_exec& g) {
  round_bf16_kernel<<<blocks_for(n), kThreads, 0, g.stream>>>(x, n);
  check_launch();
}

}  // namespace

void cuda_muon_orthogonalize(const muon_matrix& mat, const muon_settings& s, double clip,
                             float* momentum, const void* grad, dtype_id gt, float* update,
                             void* workspace, int64_t workspace_bytes, gpu_exec& g) {
  check(mat, s, workspace_bytes);
  const int64_t rows = mat.rows, cols = mat.cols, elems = rows * cols;
  auto [tall, m, n, x, xn, a, b] = muon_ns_shape_of(rows, cols, workspace);
  const bool bf16 = s.ns_dtype == dtype_id::bf16;
  momentum_kernel<<<blocks_for(elems), kThreads, 0, g.stream>>>(
      x, momentum, grad, gt, rows, cols, tall, static_cast<float>(1.0 - s.momentum),
      static_cast<float>(s.momentum), s.nesterov, bf16, g.scalars, clip);
  check_launch();
  // The norm waits in a[0] until the first Gram matrix overwrites it.
  norm_kernel<<<1, kNormThreads, 0, g.stream>>>(a, x, elems, bf16);
  check_launch();
  divide_kernel<<<blocks_for(elems), kThreads, 0, g.stream>>>(x, elems, a, bf16);
  check_launch();
  // As runtime/cpu/muon.cpp's ns_iterate: A = X X^T, B = b A + c A A,
  // X <- a X + B X; beta's matrix is a separate input (c_in), so nothing is copied.
  cuda_gemm_extras<float> extras;
  for (int it = 0; it < s.ns_steps; ++it) {
    cuda_gemm(false, true, m, m, n, 1.0f, x, n, x, n, 0.0f, a, m, g);
    if (bf16) round_all_bf16(a, m * m, g);
    extras.c_in = a;
    cuda_gemm(false, false, m, m, m, kMuonNsC, a, m, a, m, kMuonNsB, b, m, g, extras);
    if (bf16) round_all_bf16(b, m * m, g);
    extras.c_in = x;
    cuda_gemm(false, false, m, n, m, 1.0f, b, m, x, n, kMuonNsA, xn, n, g, extras);
    if (bf16) round_all_bf16(xn, m * n, g);
    std::swap(x, xn);
  }
  write_update_kernel<<<blocks_for(elems), kThreads, 0, g.stream>>>(update, x, rows, cols, tall);
  check_launch();
}

void cuda_muon_apply_shard(const gpu_muon_unit& unit, int64_t n, float* w, float* state,
                           const void* grad, dtype_id gt, const float* muon_update, void* param,
                           dtype_id param_t, const gpu_muon_apply_args& a, gpu_exec& g) {
  if (n <= 0) return;
  if (unit.count <= 0)
    throw std::runtime_error(
        "muon (CUDA): the shard step has no parts table for its unit (set-up did not upload it)");
  apply_kernel<<<blocks_for(n), kThreads, 0, g.stream>>>(unit.parts, unit.count, n, w, state,
                                                         state + unit.state_stride, grad, gt,
                                                         muon_update, param, param_t, a, g.scalars);
  check_launch();
}
