// optimizer_kernels (CUDA): AdamW's update, a thread per value, and the
// gradient norm's sum of squares, per block then in one block in a fixed
// order (launchers in kernels.cuh).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/device.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/cuda/kernels_shared.cuh"
#include "runtime/dtype.h"
#include "runtime/optimizer_math.h"

namespace {

constexpr int kSumSquaresThreads = 512;
constexpr int kSumSquaresFinalThreads = 1024;

// c1, c2: the bias corrections 1 - beta^t; wd: weight decay, 0 when not decayed.
template <class G>
__global__ void adamw_kernel(float* master, float* m, float* v, const G* grad, int64_t begin,
                             int64_t end, float lr, float beta1, float beta2, float c1, float c2,
                             float eps, float wd, float grad_scale) {
  const int64_t i = begin + blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= end) return;
  adamw_update(master[i], m[i], v[i], to_float(grad[i]) * grad_scale, lr, beta1, beta2, c1, c2, eps,
               wd);
}

// partial[block] = sum of x[i]^2 over the block's grid-stride share of [0, n).
template <class G>
__global__ void sum_squares_partial_kernel(float* partial, const G* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float xi = to_float(x[i]);
    acc += xi * xi;
  }
  acc = block_reduce(acc, sum_op{}, 0.0f);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_squares_final_kernel(float* sum, const float* partial, int64_t count) {
  block_add_sum(sum, partial, count);
}

template <class G>
void adamw_launch(float* master, float* m, float* v, const G* grad, int64_t begin, int64_t end,
                  float lr, float beta1, float beta2, float c1, float c2, float eps, float wd,
                  float grad_scale, cudaStream_t stream) {
  adamw_kernel<<<grid_dim(ceil_div(end - begin, kElementwiseThreads)), kElementwiseThreads, 0,
                 stream>>>(master, m, v, dev(grad), begin, end, lr, beta1, beta2, c1, c2, eps, wd,
                           grad_scale);
  CUDA_CHECK(cudaGetLastError());
}

template <class G>
void sum_squares_launch(float* sum, float* scratch, const G* x, int64_t n, cudaStream_t stream) {
  const int64_t blocks = std::min(kSumSquaresScratchFloats, ceil_div(n, kSumSquaresThreads));
  sum_squares_partial_kernel<<<grid_dim(blocks), kSumSquaresThreads, 0, stream>>>(scratch, dev(x),
                                                                                  n);
  CUDA_CHECK(cudaGetLastError());
  sum_squares_final_kernel<<<1, kSumSquaresFinalThreads, 0, stream>>>(sum, scratch, blocks);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void optimizer_adamw(float* master, float* m, float* v, const void* grad, dtype_id g, int64_t begin,
                     int64_t end, float lr, float beta1, float beta2, float eps, float weight_decay,
                     bool decay, int64_t t, float grad_scale, cudaStream_t stream) {
  if (end <= begin) return;
  // Computed as optimizer_adamw computes them (std::pow in float).
  const float c1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float c2 = 1.0f - std::pow(beta2, static_cast<float>(t));
  const float wd = decay ? weight_decay : 0.0f;
  switch (g) {
    case dtype_id::fp32:
      return adamw_launch(master, m, v, static_cast<const float*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
    case dtype_id::bf16:
      return adamw_launch(master, m, v, static_cast<const bf16*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
    case dtype_id::fp16:
      return adamw_launch(master, m, v, static_cast<const fp16*>(grad), begin, end, lr, beta1,
                          beta2, c1, c2, eps, wd, grad_scale, stream);
  }
}

void cuda_sum_squares(float* sum, float* scratch, const void* x, dtype_id t, int64_t n,
                      cudaStream_t stream) {
  if (n == 0) return;
  switch (t) {
    case dtype_id::fp32:
      return sum_squares_launch(sum, scratch, static_cast<const float*>(x), n, stream);
    case dtype_id::bf16:
      return sum_squares_launch(sum, scratch, static_cast<const bf16*>(x), n, stream);
    case dtype_id::fp16:
      return sum_squares_launch(sum, scratch, static_cast<const fp16*>(x), n, stream);
  }
}
