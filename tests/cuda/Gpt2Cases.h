// Gpt2Cases: what the CUDA GPT-2 tests (CudaGemmTest, CudaAttentionTest,
// Gpt2Test) share: the tolerances of device results against the CPU's on
// the same stored inputs, device outputs that start as NaN (all bits set, so
// a value a kernel failed to write, or a C read although beta == 0, shows),
// host-device copies, the CPU GEMM workspace, and the fixtures: every test
// skips, saying why, where no CUDA device is present. The typed suites'
// fixtures (CudaGpt2Layer, CudaGpt2Backward) are here, outside an anonymous
// namespace, because their tests live in several of those files and
// GoogleTest requires one fixture class per suite.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cuda/check.cuh"
#include "tests/cuda/Device.h"
#include "tests/cuda/GemmExec.h"
#include "tests/runtime/Reference.h"

namespace gpt2_cases {

using ref::load;
using ref::random_vec;
using ref::store;
using ref::vec;

// Tolerances: |cuda - cpu| <= tol * (|cpu| + rms(cpu)), i.e. relative to
// each value, with an absolute floor of tol times the tensor's RMS for
// values near zero (sums that cancel). Both sides read the same stored
// inputs and compute in fp32; they differ in summation order (cuBLASLt's
// tiles and split-K against OpenBLAS, warp trees against loops), expf
// against the CPU's polynomial exp, and, in a block, the bias and residual
// that cuda_gemm adds before its one rounding where the CPU rounds twice.
//  - fp32 storage: 1e-4. Sums have at most a few hundred unit-scale terms,
//    so differences are ~1e-6; a wrong or missing term errs by ~1e-1.
//  - bf16 outputs of one operation (GEMM, attention): 2e-2. A few fp32 ulps
//    of difference can round to neighbouring bf16 values, one bf16 ulp
//    (at most 2^-7 ~ 7.8e-3 relative) apart; attention rounds scores, then
//    probabilities, then outputs.
//  - bf16 outputs of a whole layer: 5e-2. One-ulp differences of
//    intermediates (every res2 value may differ by one, from the fused
//    residual) propagate through ~10 kernels and sums of C or F terms; the
//    largest of thousands of such random-walk errors reaches ~1-2%. A real
//    bug (a wrong mask, bias, index or scale) errs by the values' own size.
//  - Plain GEMMs rounding to bf16 once: 1e-2 (one bf16 ulp).
//  - The embedding adds the same fp32 values in the same order on both
//    sides: KernelTest's storage tolerance (1e-5, or 1e-2 relative for bf16).
//  - bf16 losses are fp32 but read bf16 logits (|x| < ~3 here) that may
//    differ by one ulp: 3e-2 absolute, 1e-2 relative.
inline constexpr double kFp32Tol = 1e-4;
inline constexpr double kBf16OpTol = 2e-2;
inline constexpr double kBf16LayerTol = 5e-2;
inline constexpr double kBf16GemmTol = 1e-2;
inline constexpr ref::tolerance kBf16LossTol{3e-2, 1e-2};

template <class T>
constexpr bool is_bf16 = sizeof(T) == 2;
template <class T>
double op_tol() {
  return is_bf16<T> ? kBf16OpTol : kFp32Tol;
}
template <class T>
double layer_tol() {
  return is_bf16<T> ? kBf16LayerTol : kFp32Tol;
}
template <class T, class G>
double grad_tol() {
  return is_bf16<T> || is_bf16<G> ? kBf16LayerTol : kFp32Tol;
}
template <class T>
ref::tolerance storage_tol() {
  return ref::tolerance{1e-5, is_bf16<T> ? 1e-2 : 1e-5};
}

using ref::expect_close_scaled;

// All bits set: NaN as fp32 and as bf16.
inline constexpr int kNanFill = 0xff;

// Outputs start as NaN, so that a value a launcher forgot to write shows.
template <class T>
struct nan_vec : device_vec<T> {
  explicit nan_vec(const std::vector<T>& host) : device_vec<T>(host) {}
  explicit nan_vec(int64_t n) : device_vec<T>(n, kNanFill) {}
};

template <class T>
void to_device(T* dst, const T* src, int64_t n) {
  CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
std::vector<T> from_device(const T* src, int64_t n) {
  std::vector<T> host(n);
  CUDA_CHECK(cudaMemcpy(host.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

inline gemm_workspace cpu_workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  return gemm_workspace{buf.data(), static_cast<int64_t>(buf.size())};
}

// Skips without a device; otherwise gives each test a stream, a cuBLASLt
// handle, workspace and plan cache in g.
using Gpt2Fixture = CudaGemmFixture;

using StorageTypes = ::testing::Types<float, bf16>;
template <class T>
class CudaGpt2Layer : public Gpt2Fixture {};
TYPED_TEST_SUITE(CudaGpt2Layer, StorageTypes, ref::StorageTypeNames);
template <class P>
class CudaGpt2Backward : public Gpt2Fixture {};
using StorageGradTypes =
    ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<float, bf16>,
                     ref::storage_grad<bf16, float>, ref::storage_grad<bf16, bf16>>;
TYPED_TEST_SUITE(CudaGpt2Backward, StorageGradTypes, ref::StorageGradNames);

template <class T>
std::vector<T> random_stored(std::mt19937& rng, int64_t n, double scale = 1.0,
                             double offset = 0.0) {
  return store<T>(random_vec(rng, n, scale, offset));
}

template <class T>
void expect_close_scaled(const std::string& what, const std::vector<T>& got,
                         const std::vector<T>& want, double tol) {
  expect_close_scaled(what, load(got), load(want), tol);
}

}  // namespace gpt2_cases
