// Gpt2Test (cuda): runtime/cuda/gemm.h, attention.h (materialized and
// flash) and gpt2.h (with either attention layout) against their CPU
// counterparts (runtime/gemm.h, runtime/kernels.h, runtime/gpt2.h)
// on the same random inputs (fixed seeds), for fp32 and bf16 storage and
// gradients, printing the largest absolute and relative differences. Device
// outputs start as NaN (all bits set), so a value a kernel failed to write,
// or a C read although beta == 0, shows. Each test skips, saying why, where
// no CUDA device is present.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "../runtime/BlockLayout.h"
#include "../runtime/Reference.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/gpt2.h"
#include "runtime/gemm.h"
#include "runtime/gpt2.h"
#include "runtime/kernels.h"
#include "tests/cuda/Device.h"
#include "tests/cuda/GemmExec.h"

using ref::block_flat;
using ref::block_flat_elems;
using ref::block_pointers;
using ref::block_tensor_elems;
using ref::load;
using ref::random_vec;
using ref::store;
using ref::tag;
using ref::to_gpt2;
using ref::vec;

namespace {

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
constexpr double kFp32Tol = 1e-4;
constexpr double kBf16OpTol = 2e-2;
constexpr double kBf16LayerTol = 5e-2;
constexpr double kBf16GemmTol = 1e-2;
constexpr ref::tolerance kBf16LossTol{3e-2, 1e-2};

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
constexpr int kNanFill = 0xff;

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

// Bytes after a saved slot or scratch that must keep their NaN fill.
constexpr int64_t kGuardBytes = 256;
bool guard_intact(const std::vector<std::byte>& buf, int64_t bytes) {
  for (int64_t i = bytes; i < static_cast<int64_t>(buf.size()); i++)
    if (buf[i] != std::byte{kNanFill}) return false;
  return true;
}

gemm_workspace cpu_workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  return gemm_workspace{buf.data(), static_cast<int64_t>(buf.size())};
}

// Skips without a device; otherwise gives each test a stream, a cuBLASLt
// handle, workspace and plan cache in g.
using Gpt2Fixture = CudaGemmFixture;

using StorageTypes = ::testing::Types<float, bf16>;
class CudaGemm : public Gpt2Fixture {};
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

std::string transposes(bool ta, bool tb) {
  return std::string(ta ? "T" : "N") + (tb ? "T" : "N");
}

// ---------------------------------------------------------------- gemm

struct gemm_shape {
  int64_t M, N, K, pad;  // pad: extra elements per row of A, B and C
};
// Edges not multiples of any tile, padded rows (bf16 rows then 2-byte
// aligned), a single row, and aligned sizes.
constexpr gemm_shape kGemmShapes[] = {{37, 45, 70, 3}, {1, 33, 7, 1}, {64, 96, 128, 0}};

template <class TA, class TB, class TC>
void check_gemm(gpu_exec& g, bool ta, bool tb, const gemm_shape& s, float beta, uint32_t seed) {
  const int64_t M = s.M, N = s.N, K = s.K;
  const int64_t lda = (ta ? M : K) + s.pad, ldb = (tb ? K : N) + s.pad, ldc = N + s.pad;
  const int64_t c_elems = M * ldc;
  const float alpha = 0.75f;
  std::mt19937 rng(seed);
  const auto A = random_stored<TA>(rng, (ta ? K : M) * lda);
  const auto B = random_stored<TB>(rng, (tb ? N : K) * ldb);
  auto C = random_stored<TC>(rng, c_elems);

  // The device C holds C when beta reads it, else NaN, which must not be read.
  nan_vec<TA> A_d(A);
  nan_vec<TB> B_d(B);
  nan_vec<TC> C_d(c_elems);
  if (beta != 0.0f) to_device(C_d.get(), C.data(), c_elems);
  const std::vector<TC> before = C_d.download();
  cuda_gemm(ta, tb, M, N, K, alpha, A_d.get(), lda, B_d.get(), ldb, beta, C_d.get(), ldc, g);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  if (beta == 0.0f) std::fill(C.begin(), C.end(), from_float<TC>(0.0f));
  gemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, cpu_workspace());

  const std::vector<TC> got = C_d.download();
  vec got_mn, want_mn;
  bool padding_intact = true;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < ldc; j++) {
      const int64_t idx = i * ldc + j;
      if (j < N) {
        got_mn.push_back(to_float(got[idx]));
        want_mn.push_back(to_float(C[idx]));
      } else if (std::memcmp(&got[idx], &before[idx], sizeof(TC)) != 0) {
        padding_intact = false;
      }
    }
  const std::string what = std::string("cuda_gemm<") + ref::type_name<TA>() + "," +
                           ref::type_name<TB>() + "," + ref::type_name<TC>() + "> " +
                           transposes(ta, tb) + " M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) +
                           " pad=" + std::to_string(s.pad) + " beta=" + std::to_string(beta);
  expect_close_scaled(what, got_mn, want_mn, is_bf16<TC> ? kBf16GemmTol : kFp32Tol);
  EXPECT_TRUE(padding_intact) << what << ": wrote outside the M x N matrix";
}

// Every operand type combination (cuBLASLt's three, the fallback kernel's
// five), every transpose, beta 0 and 1.
TEST_F(CudaGemm, MatchesCpu) {
  uint32_t seed = 100;
  for (const gemm_shape& s : kGemmShapes)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true})
        for (const float beta : {0.0f, 1.0f}) {
          check_gemm<float, float, float>(g, ta, tb, s, beta, seed++);
          check_gemm<bf16, bf16, bf16>(g, ta, tb, s, beta, seed++);
          check_gemm<bf16, bf16, float>(g, ta, tb, s, beta, seed++);
          check_gemm<float, float, bf16>(g, ta, tb, s, beta, seed++);
          check_gemm<float, bf16, float>(g, ta, tb, s, beta, seed++);
          check_gemm<float, bf16, bf16>(g, ta, tb, s, beta, seed++);
          check_gemm<bf16, float, float>(g, ta, tb, s, beta, seed++);
          check_gemm<bf16, float, bf16>(g, ta, tb, s, beta, seed++);
        }
}

struct gemm_extras_case {
  bool bias, c_in;
  int64_t batch;
  float beta;
};
constexpr gemm_extras_case kGemmExtrasCases[] = {
    {true, false, 1, 0.0f},  // matmul_forward
    {true, true, 1, 1.0f},   // matmul_forward with the residual
    {false, true, 3, 0.5f},  // batched, C read from c_in
    {false, false, 3, 0.0f}  // batched, as attention
};

// Bias, separate C input and strided batches against a double-precision
// sum of the same stored values.
template <class TA, class TB, class TC>
void check_gemm_extras(gpu_exec& g, bool ta, bool tb, const gemm_extras_case& x, uint32_t seed) {
  const int64_t M = 33, N = 40, K = 24, gap = 16;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  const int64_t stride_a = (ta ? K : M) * lda + gap, stride_b = (tb ? N : K) * ldb + gap,
                stride_c = M * ldc + gap;
  const int64_t items = x.batch;
  const float alpha = 1.25f;
  std::mt19937 rng(seed);
  const auto A = random_stored<TA>(rng, items * stride_a);
  const auto B = random_stored<TB>(rng, items * stride_b);
  const auto C_in = random_stored<TC>(rng, items * stride_c);
  const auto bias = random_stored<TC>(rng, N);

  nan_vec<TA> A_d(A);
  nan_vec<TB> B_d(B);
  nan_vec<TC> C_in_d(C_in), bias_d(bias), C_d(items * stride_c);
  cuda_gemm_extras<TC> e;
  e.bias = x.bias ? bias_d.get() : nullptr;
  e.c_in = x.c_in ? C_in_d.get() : nullptr;
  e.batch = items;
  e.stride_a = stride_a;
  e.stride_b = stride_b;
  e.stride_c = stride_c;
  cuda_gemm(ta, tb, M, N, K, alpha, A_d.get(), lda, B_d.get(), ldb, x.beta, C_d.get(), ldc, g, e);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  const std::vector<TC> got = C_d.download();

  vec got_v, want_v;
  for (int64_t z = 0; z < items; z++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0.0;
        for (int64_t k = 0; k < K; k++) {
          const double a = to_float(A[z * stride_a + (ta ? k * lda + i : i * lda + k)]);
          const double b = to_float(B[z * stride_b + (tb ? j * ldb + k : k * ldb + j)]);
          s += a * b;
        }
        double want = alpha * s;
        if (x.beta != 0.0f && x.c_in) want += x.beta * to_float(C_in[z * stride_c + i * ldc + j]);
        if (x.bias) want += to_float(bias[j]);
        got_v.push_back(to_float(got[z * stride_c + i * ldc + j]));
        want_v.push_back(want);
      }
  // beta != 0 without c_in reads C itself, which holds NaN here: not a case above.
  const std::string what = std::string("cuda_gemm<") + ref::type_name<TA>() + "," +
                           ref::type_name<TB>() + "," + ref::type_name<TC>() + "> " +
                           transposes(ta, tb) + (x.bias ? " bias" : "") + (x.c_in ? " c_in" : "") +
                           " batch=" + std::to_string(items) + " beta=" + std::to_string(x.beta);
  expect_close_scaled(what, got_v, want_v, is_bf16<TC> ? kBf16GemmTol : kFp32Tol);
}

TEST_F(CudaGemm, Extras) {
  uint32_t seed = 200;
  for (const gemm_extras_case& x : kGemmExtrasCases)
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        check_gemm_extras<float, float, float>(g, ta, tb, x, seed++);
        check_gemm_extras<bf16, bf16, bf16>(g, ta, tb, x, seed++);
        check_gemm_extras<bf16, bf16, float>(g, ta, tb, x, seed++);
        check_gemm_extras<float, float, bf16>(g, ta, tb, x, seed++);  // the fallback kernel
      }
  // The same GEMMs again: every plan is reused, none added.
  const int64_t plans = gpu_gemm_cache_plans(g.gemms);
  EXPECT_GT(plans, 0);
  for (const gemm_extras_case& x : kGemmExtrasCases)
    check_gemm_extras<bf16, bf16, bf16>(g, false, true, x, 300);
  EXPECT_EQ(gpu_gemm_cache_plans(g.gemms), plans);
}

// ---------------------------------------------------------------- gemm epilogues

// Tolerances of the GELU epilogues: the CPU kernels gelu_forward and
// gelu_backward (fp32, on the unrounded fp32 reference product) are the
// reference. fp32: 2e-5 absolute + 1e-5 relative. The products sum K = 24
// unit-scale terms (fp32 differences ~1e-6) and the GELUs differ by a few
// ulps (expf or tanhf against the CPU's polynomial exp); the erf GELU differs
// from the tanh one by up to 4.7e-4 (at x = -2.7) and its derivative by up to
// 8.7e-4 (at x = -2.0), which this catches with pre-activations spread over
// [-4, 4]. 16-bit outputs, rounded once: kBf16GemmTol relative to the
// tensor's scale (fp16's ulp is 8x smaller than bf16's).
constexpr ref::tolerance kFp32GeluTol{2e-5, 1e-5};

template <class T>
void expect_epilogue_close(const std::string& what, const vec& got, const vec& want) {
  if (is_bf16<T>)
    expect_close_scaled(what, got, want, kBf16GemmTol);
  else
    ref::expect_close(what, got, want, kFp32GeluTol);
}

// The product op(A) op(B) (+ bias) in double, rounded to fp32: the CPU GELU
// kernels' input. A is (M x K) stored transposed when ta, B (K x N).
template <class T>
std::vector<float> product(const std::vector<T>& A, const std::vector<T>& B, const T* bias, bool ta,
                           int64_t M, int64_t N, int64_t K) {
  std::vector<float> out(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = bias ? to_float(bias[j]) : 0.0;
      for (int64_t k = 0; k < K; k++)
        s += double{to_float(A[ta ? k * M + i : i * K + k])} * to_float(B[k * N + j]);
      out[i * N + j] = static_cast<float>(s);
    }
  return out;
}

// gelu_aux and dgelu against gelu_forward / gelu_backward of the CPU on the
// same product; N = 40 takes cuBLASLt's epilogue where it has one, N = 45
// (aux_ld not a multiple of 8) the separate kernels.
template <class T>
void check_gelu_epilogues(gpu_exec& g, int64_t N, uint32_t seed) {
  const int64_t M = 33, K = 24;
  std::mt19937 rng(seed);
  const auto A = random_stored<T>(rng, M * K), B = random_stored<T>(rng, K * N, 0.8);
  const auto bias = random_stored<T>(rng, N, 0.5);
  const auto dprod_in = random_stored<T>(rng, M * K);  // dgelu: dout (M x K) @ B
  const std::string what =
      std::string("cuda_gemm<") + ref::type_name<T>() + "> N=" + std::to_string(N) + " ";

  // Forward: aux = A B + bias, C = gelu(aux).
  const std::vector<float> pre = product(A, B, bias.data(), false, M, N, K);
  std::vector<float> want_gelu(M * N);
  gelu_forward(want_gelu.data(), pre.data(), M * N);
  nan_vec<T> A_d(A), B_d(B), bias_d(bias), aux_d(M * N), C_d(M * N);
  cuda_gemm_extras<T> e;
  e.bias = bias_d.get();
  e.epilogue = gemm_epilogue::gelu_aux;
  e.aux = aux_d.get();
  e.aux_ld = N;
  cuda_gemm(false, false, M, N, K, 1.0f, A_d.get(), K, B_d.get(), N, 0.0f, C_d.get(), N, g, e);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  const std::vector<T> aux = aux_d.download();
  expect_epilogue_close<T>(what + "gelu_aux aux", load(aux), load(pre.data(), M * N));
  expect_epilogue_close<T>(what + "gelu_aux C", load(C_d.download()),
                           load(want_gelu.data(), M * N));

  // Backward: C = (dout B^T) * gelu'(aux), from the aux the forward saved.
  std::vector<float> dprod(M * N), aux_f(M * N), want_dgelu(M * N);
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double s = 0.0;
      for (int64_t k = 0; k < K; k++)
        s += double{to_float(dprod_in[i * K + k])} * to_float(B[k * N + j]);
      dprod[i * N + j] = static_cast<float>(s);
    }
  for (int64_t i = 0; i < M * N; i++)
    aux_f[i] = to_float(aux[i]);
  gelu_backward(want_dgelu.data(), aux_f.data(), dprod.data(), M * N);
  // B^T as the GEMM reads it: op(B) = B^T with B (N x K) stored = our (K x N) B transposed.
  std::vector<T> Bt(N * K);
  for (int64_t k = 0; k < K; k++)
    for (int64_t j = 0; j < N; j++)
      Bt[j * K + k] = B[k * N + j];
  nan_vec<T> dprod_in_d(dprod_in), Bt_d(Bt), D_d(M * N);
  cuda_gemm_extras<T> d;
  d.epilogue = gemm_epilogue::dgelu;
  d.aux = aux_d.get();
  d.aux_ld = N;
  cuda_gemm(false, true, M, N, K, 1.0f, dprod_in_d.get(), K, Bt_d.get(), K, 0.0f, D_d.get(), N, g,
            d);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  expect_epilogue_close<T>(what + "dgelu C", load(D_d.download()), load(want_dgelu.data(), M * N));
}

TEST_F(CudaGemm, GeluEpilogues) {
  uint32_t seed = 350;
  for (const int64_t N : {40, 45}) {
    check_gelu_epilogues<float>(g, N, seed++);
    check_gelu_epilogues<bf16>(g, N, seed++);
    check_gelu_epilogues<fp16>(g, N, seed++);
  }
  // The cuBLASLt-supported 16-bit GEMMs of N = 40 run their GELU inside the
  // GEMM on an H100 (as llm.c does); the same calls again add no plan.
  const int64_t fused = gpu_gemm_cache_fused_plans(g.gemms);
  EXPECT_GE(fused, 4) << "bf16 and fp16 gelu_aux and dgelu took the separate kernels";
  const int64_t plans = gpu_gemm_cache_plans(g.gemms);
  check_gelu_epilogues<bf16>(g, 40, 360);
  check_gelu_epilogues<bf16>(g, 45, 361);
  EXPECT_EQ(gpu_gemm_cache_plans(g.gemms), plans);
  std::cout << "cuda_gemm: " << fused << " of " << plans << " plans run an epilogue\n";
}

// bgrad_b on the dweight GEMM (dweight += A^T dout, dout (K x N)): bias_grad
// = column sums of dout against a double sum, C against the double product
// plus its initial values. A 16-byte aligned bias_grad may take cuBLASLt's
// BGRADA; one 4 bytes off always takes the separate column sums (with
// scratch). The sums have K = 300 unit-scale terms (~17): fp32 differences
// ~1e-5, inside kFp32Tol of the scaled comparison.
template <class T>
void check_bgrad(gpu_exec& g, bool aligned, uint32_t seed) {
  const int64_t M = 24, N = 72, K = 300;
  std::mt19937 rng(seed);
  const auto A = random_stored<T>(rng, K * M), dout = random_stored<T>(rng, K * N);
  const auto C0 = random_stored<float>(rng, M * N);
  std::vector<float> want_c(M * N);
  const std::vector<float> prod = product(A, dout, static_cast<const T*>(nullptr), true, M, N, K);
  for (int64_t i = 0; i < M * N; i++)
    want_c[i] = C0[i] + prod[i];
  vec want_bias(N);
  for (int64_t j = 0; j < N; j++)
    for (int64_t k = 0; k < K; k++)
      want_bias[j] += to_float(dout[k * N + j]);

  nan_vec<T> A_d(A), dout_d(dout);
  nan_vec<float> C_d(C0), sums_d(N + 1), scratch_d(K * N);
  cuda_gemm_extras<float> e;
  e.epilogue = gemm_epilogue::bgrad_b;
  e.bias_grad = sums_d.get() + (aligned ? 0 : 1);
  e.scratch = scratch_d.get();
  e.scratch_floats = K * N;
  cuda_gemm(true, false, M, N, K, 1.0f, A_d.get(), M, dout_d.get(), N, 1.0f, C_d.get(), N, g, e);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  const std::string what = std::string("cuda_gemm<") + ref::type_name<T>() + "," +
                           ref::type_name<T>() + ",fp32> bgrad_b" +
                           (aligned ? "" : " (bias_grad 4-byte aligned) ");
  const std::vector<float> sums = sums_d.download();
  expect_close_scaled(what + "bias_grad", load(sums.data() + (aligned ? 0 : 1), N), want_bias,
                      kFp32Tol);
  expect_close_scaled(what + "C", load(C_d.download()), load(want_c.data(), M * N), kFp32Tol);
}

TEST_F(CudaGemm, BiasGradEpilogue) {
  uint32_t seed = 370;
  for (const bool aligned : {true, false}) {
    check_bgrad<float>(g, aligned, seed++);
    check_bgrad<bf16>(g, aligned, seed++);
    check_bgrad<fp16>(g, aligned, seed++);
  }
}

// Runs f, which must throw std::invalid_argument naming `reason`.
template <class F>
void expect_rejected(F f, const std::string& reason) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a refusal naming \"" << reason << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos)
        << "refused for another reason: " << e.what() << " (expected \"" << reason << "\")";
  }
}

// Epilogues' requirements are checked before anything is enqueued (so this
// runs without a device); each refusal names its reason.
TEST(CudaGemmEpilogue, RejectsBadArguments) {
  gpu_exec g;
  // Never dereferenced: each call throws before it enqueues anything.
  bf16* h = reinterpret_cast<bf16*>(uintptr_t{4096});
  float* f = reinterpret_cast<float*>(uintptr_t{8192});
  cuda_gemm_extras<bf16> gelu;
  gelu.epilogue = gemm_epilogue::gelu_aux;
  gelu.aux = h;
  gelu.aux_ld = 8;
  auto gelu_gemm = [&](float alpha, float beta, int64_t ldc) {
    cuda_gemm(false, false, 4, 8, 8, alpha, h, 8, h, 8, beta, h, ldc, g, gelu);
  };
  expect_rejected([&] { gelu_gemm(1.0f, 0.0f, 8); }, "gelu_aux epilogue without bias");
  gelu.bias = h;
  expect_rejected([&] { gelu_gemm(1.0f, 1.0f, 8); }, "with beta");
  expect_rejected([&] { gelu_gemm(1.0f, 0.0f, 16); }, "needs ldc == aux_ld == N");
  expect_rejected([&] { gelu_gemm(2.0f, 0.0f, 8); }, "with alpha");
  gelu.aux = nullptr;
  expect_rejected([&] { gelu_gemm(1.0f, 0.0f, 8); }, "without aux");
  cuda_gemm_extras<bf16> dgelu;
  dgelu.epilogue = gemm_epilogue::dgelu;
  dgelu.aux = h;
  dgelu.aux_ld = 8;
  dgelu.bias = h;
  expect_rejected([&] { cuda_gemm(false, true, 4, 8, 8, 1.0f, h, 8, h, 8, 0.0f, h, 8, g, dgelu); },
                  "dgelu epilogue with a bias");
  cuda_gemm_extras<bf16> bgrad_h;
  bgrad_h.epilogue = gemm_epilogue::bgrad_b;
  bgrad_h.bias_grad = f;
  expect_rejected(
      [&] { cuda_gemm(true, false, 4, 8, 8, 1.0f, h, 4, h, 8, 1.0f, h, 8, g, bgrad_h); },
      "with a 16-bit C");
  cuda_gemm_extras<float> bgrad;
  bgrad.epilogue = gemm_epilogue::bgrad_b;
  expect_rejected([&] { cuda_gemm(true, false, 4, 8, 8, 1.0f, h, 4, h, 8, 1.0f, f, 8, g, bgrad); },
                  "without bias_grad");
  bgrad.bias_grad = f;
  expect_rejected([&] { cuda_gemm(true, true, 4, 8, 8, 1.0f, h, 4, h, 8, 1.0f, f, 8, g, bgrad); },
                  "needs B untransposed");
  bgrad.batch = 2;
  expect_rejected([&] { cuda_gemm(true, false, 4, 8, 8, 1.0f, h, 4, h, 8, 1.0f, f, 8, g, bgrad); },
                  "epilogue with batch 2");
}

// Column sums with and without scratch for partial sums (N spans several
// row groups; OC is not a multiple of a block's channels), added to what
// dbias holds.
TYPED_TEST(CudaGpt2Backward, GemmBias) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t N = 1000, OC = 70;
  std::mt19937 rng(400);
  const auto dout = random_stored<T>(rng, N * OC);
  const auto dbias = random_stored<G>(rng, OC);
  vec want(OC);
  for (int64_t c = 0; c < OC; c++) {
    double s = to_float(dbias[c]);
    for (int64_t n = 0; n < N; n++)
      s += to_float(dout[n * OC + c]);
    want[c] = s;
  }
  for (const bool scratch : {false, true}) {
    nan_vec<T> dout_d(dout);
    nan_vec<G> dbias_d(dbias);
    nan_vec<float> scratch_d(N * OC);
    cuda_gemm_bias_backward(dbias_d.get(), dout_d.get(), N, OC, scratch ? scratch_d.get() : nullptr,
                            scratch ? N * OC : 0, this->g.stream);
    this->sync();
    // Sums of 1000 unit-scale terms (~18) in fp32, rounded to G once.
    expect_close_scaled(
        tag<T, G>("cuda_gemm_bias_backward", scratch ? "dbias (partials)" : "dbias"),
        load(dbias_d.download()), want, is_bf16<G> ? kBf16GemmTol : kFp32Tol);
  }
}

// ---------------------------------------------------------------- attention

struct attention_shape {
  int64_t B, T, C, H;
};
// T below, across and above a warp's 32 columns; head sizes 16, 16, 8.
constexpr attention_shape kAttentionShapes[] = {{2, 16, 64, 4}, {3, 13, 48, 3}, {1, 40, 32, 4}};

std::string shape_name(const attention_shape& s) {
  return " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
         " H=" + std::to_string(s.H);
}

TYPED_TEST(CudaGpt2Layer, AttentionForward) {
  using T = TypeParam;
  for (const attention_shape& a : kAttentionShapes) {
    const int64_t N = a.B * a.T, P = a.B * a.H * a.T * a.T;
    std::mt19937 rng(500);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C);
    std::vector<T> out(N * a.C), probs(P);
    attention_forward(out.data(), probs.data(), qkv.data(), a.B, a.T, a.C, a.H, cpu_workspace());

    nan_vec<T> qkv_d(qkv), out_d(N * a.C), probs_d(P);
    cuda_attention_forward(out_d.get(), probs_d.get(), qkv_d.get(), a.B, a.T, a.C, a.H, this->g);
    this->sync();
    expect_close_scaled(tag<T>("cuda_attention_forward", "out") + shape_name(a), out_d.download(),
                        out, op_tol<T>());
    expect_close_scaled(tag<T>("cuda_attention_forward", "probs") + shape_name(a),
                        probs_d.download(), probs, op_tol<T>());
  }
}

// Both sides read the CPU forward's probabilities.
TYPED_TEST(CudaGpt2Layer, AttentionBackward) {
  using T = TypeParam;
  for (const attention_shape& a : kAttentionShapes) {
    const int64_t N = a.B * a.T, P = a.B * a.H * a.T * a.T;
    std::mt19937 rng(600);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C);
    const auto dout = random_stored<T>(rng, N * a.C);
    std::vector<T> out(N * a.C), probs(P), dqkv(N * 3 * a.C), dprobs(P);
    attention_forward(out.data(), probs.data(), qkv.data(), a.B, a.T, a.C, a.H, cpu_workspace());
    attention_backward(dqkv.data(), dprobs.data(), dout.data(), qkv.data(), probs.data(), a.B, a.T,
                       a.C, a.H, cpu_workspace());

    nan_vec<T> qkv_d(qkv), probs_d(probs), dout_d(dout), dqkv_d(N * 3 * a.C), dprobs_d(P);
    cuda_attention_backward(dqkv_d.get(), dprobs_d.get(), dout_d.get(), qkv_d.get(), probs_d.get(),
                            a.B, a.T, a.C, a.H, this->g);
    this->sync();
    expect_close_scaled(tag<T>("cuda_attention_backward", "dqkv") + shape_name(a),
                        dqkv_d.download(), dqkv, op_tol<T>());
    expect_close_scaled(tag<T>("cuda_attention_backward", "dprobs") + shape_name(a),
                        dprobs_d.download(), dprobs, op_tol<T>());
  }
}

// ---------------------------------------------------------------- flash attention

// Flash shapes: T below, across and at the 32-query tiles (13, 40, 64),
// ragged tails (70, 100), several heads and sequences (B*H up to 9), head
// sizes 8, 16, 64, 80 (three 32-column chunks, the last partial), 96, 128,
// 160 (GPT-1T's), 200 (seven chunks, the last partial) and 256 (the largest
// the kernels take).
constexpr attention_shape kFlashShapes[] = {
    {2, 16, 64, 4}, {3, 13, 48, 3},   {1, 40, 32, 4},  {2, 70, 256, 4}, {2, 33, 160, 2},
    {1, 64, 96, 1}, {3, 100, 384, 3}, {2, 40, 320, 2}, {1, 33, 200, 1}, {1, 70, 512, 2}};

// The flash kernels against the CPU's flash reference (attention_forward_flash):
// out to the attention tolerance (fp32 1e-4; bf16 2e-2, one rounding of the
// output after fp32 sums in a different order), lse to the fp32 tolerance
// whatever T is (fp32 from the same stored q and k). Outputs start as NaN.
TYPED_TEST(CudaGpt2Layer, AttentionFlashForward) {
  using T = TypeParam;
  for (const attention_shape& a : kFlashShapes) {
    const int64_t N = a.B * a.T, R = a.B * a.H * a.T;
    std::mt19937 rng(1300);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C, 1.5);
    std::vector<T> out(N * a.C);
    std::vector<float> lse(R);
    attention_forward_flash(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.H);

    nan_vec<T> qkv_d(qkv), out_d(N * a.C);
    nan_vec<float> lse_d(R);
    cuda_attention_forward_flash(out_d.get(), lse_d.get(), qkv_d.get(), a.B, a.T, a.C, a.H,
                                 this->g);
    this->sync();
    expect_close_scaled(tag<T>("cuda_attention_forward_flash", "out") + shape_name(a),
                        out_d.download(), out, op_tol<T>());
    expect_close_scaled(tag<T>("cuda_attention_forward_flash", "lse") + shape_name(a),
                        lse_d.download(), lse, kFp32Tol);
  }
}

// Both sides read the CPU flash forward's out and lse; dqkv to the attention
// tolerance, delta (fp32 sums of hs products) to the fp32 one.
TYPED_TEST(CudaGpt2Layer, AttentionFlashBackward) {
  using T = TypeParam;
  for (const attention_shape& a : kFlashShapes) {
    const int64_t N = a.B * a.T, R = a.B * a.H * a.T;
    std::mt19937 rng(1400);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C, 1.5);
    const auto dout = random_stored<T>(rng, N * a.C);
    std::vector<T> out(N * a.C), dqkv(N * 3 * a.C);
    std::vector<float> lse(R), delta(R);
    attention_forward_flash(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.H);
    attention_backward_flash(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(),
                             lse.data(), a.B, a.T, a.C, a.H);

    nan_vec<T> qkv_d(qkv), dout_d(dout), out_d(out), dqkv_d(N * 3 * a.C);
    nan_vec<float> lse_d(lse), delta_d(R);
    cuda_attention_backward_flash(dqkv_d.get(), delta_d.get(), dout_d.get(), qkv_d.get(),
                                  out_d.get(), lse_d.get(), a.B, a.T, a.C, a.H, this->g);
    this->sync();
    expect_close_scaled(tag<T>("cuda_attention_backward_flash", "dqkv") + shape_name(a),
                        dqkv_d.download(), dqkv, op_tol<T>());
    expect_close_scaled(tag<T>("cuda_attention_backward_flash", "delta") + shape_name(a),
                        delta_d.download(), delta, kFp32Tol);
  }
}

// Head sizes the kernels do not take are refused before anything is
// enqueued (so this runs without a device).
TEST(CudaAttentionFlash, RejectsUnsupportedHeads) {
  gpu_exec g;
  float* f = nullptr;
  const int64_t too_wide = kCudaAttentionFlashMaxHeadSize + 1;
  EXPECT_THROW(cuda_attention_forward_flash(f, f, f, 1, 4, too_wide, 1, g), std::invalid_argument);
  EXPECT_THROW(cuda_attention_backward_flash(f, f, f, f, f, f, 1, 4, 2 * too_wide, 2, g),
               std::invalid_argument);
  EXPECT_THROW(cuda_attention_forward_flash(f, f, f, 1, 4, 10, 3, g), std::invalid_argument);
}

// ---------------------------------------------------------------- layers

// B, T, C, H, F, V: the brief's small model, one with odd T and width, and
// one whose F (84, not a multiple of 8) keeps GELU out of the MLP's GEMMs
// (cuBLASLt needs the aux matrix's leading dimension a multiple of 8).
const ref::dims kLayerDims[] = {
    {2, 16, 64, 4, 256, 96}, {3, 13, 48, 3, 80, 50}, {2, 8, 48, 3, 84, 30}};

std::string dims_name(const ref::dims& d, bool flash = false) {
  return " B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " C=" + std::to_string(d.C) +
         (flash ? " flash" : "");
}

// The layer dims with materialized or flash attention.
gpt2_dims layer_dims(const ref::dims& rd, bool flash) {
  gpt2_dims d = to_gpt2(rd);
  d.flash = flash;
  return d;
}

// Forward's saved arrays on the device against the CPU's. ln1's statistics
// read identical inputs (fp32 tolerance); the rest follow T's layer tolerance.
template <class T>
void expect_block_saved_close(const std::string& prefix, const gpt2_block_saved<T>& got,
                              const gpt2_block_saved<T>& want, const gpt2_dims& d) {
  const int64_t N = d.N(), C = d.C, F = d.F;
  auto stats = [&](const char* name, const float* dev, const float* host, double tol) {
    expect_close_scaled(prefix + name, load(from_device(dev, N)), load(host, N), tol);
  };
  auto stored = [&](const char* name, const T* dev, const T* host, int64_t n) {
    expect_close_scaled(prefix + name, load(from_device(dev, n)), load(host, n), layer_tol<T>());
  };
  stats("ln1_mean", got.ln1_mean, want.ln1_mean, kFp32Tol);
  stats("ln1_rstd", got.ln1_rstd, want.ln1_rstd, kFp32Tol);
  stats("ln2_mean", got.ln2_mean, want.ln2_mean, layer_tol<T>());
  stats("ln2_rstd", got.ln2_rstd, want.ln2_rstd, layer_tol<T>());
  stored("ln1", got.ln1, want.ln1, N * C);
  stored("qkv", got.qkv, want.qkv, N * 3 * C);
  stored("attn", got.attn, want.attn, N * C);
  stored("res2", got.res2, want.res2, N * C);
  stored("ln2", got.ln2, want.ln2, N * C);
  stored("fc", got.fc, want.fc, N * F);
  stored("gelu", got.gelu, want.gelu, N * F);
  if (d.flash)
    expect_close_scaled(prefix + "lse", load(from_device(got.lse, N * d.H)),
                        load(want.lse, N * d.H), layer_tol<T>());
  else
    stored("probs", got.probs, want.probs, N * d.H * d.T);
}

// Forward, then a recompute (out == nullptr) into a fresh slot, which must
// fill the same saved arrays; a second forward reuses every GEMM plan.
TYPED_TEST(CudaGpt2Layer, BlockForward) {
  using T = TypeParam;
  for (const ref::dims& rd : kLayerDims)
    for (const bool flash : {false, true}) {
      const gpt2_dims d = layer_dims(rd, flash);
      const int64_t N = d.N(), C = d.C;
      std::mt19937 rng(700);
      const auto params = block_flat<T>(ref::random_block(rng, rd), rd);
      const auto x = random_stored<T>(rng, N * C);
      const int64_t saved_bytes = gpt2_block_saved_bytes(d, sizeof(T));
      std::vector<std::byte> saved(saved_bytes);
      const auto s = gpt2_block_saved_at<T>(saved.data(), d);
      std::copy(x.begin(), x.end(), s.input);
      std::vector<T> out(N * C);
      gpt2_block_forward(out.data(), gpt2_block_params_at<T>(params.data(), d), s, d,
                         cpu_workspace());

      nan_vec<T> params_d(params), out_d(N * C);
      const auto p = gpt2_block_params_at<T>(params_d.get(), d);
      for (const bool recompute : {false, true}) {
        nan_vec<std::byte> slot_d(saved_bytes + kGuardBytes);
        const auto sd = gpt2_block_saved_at<T>(slot_d.get(), d);
        to_device(sd.input, x.data(), N * C);
        gpt2_block_forward(recompute ? nullptr : out_d.get(), p, sd, d, this->g);
        this->sync();
        const std::string prefix = tag<T>("gpt2_block_forward", recompute ? "(recompute) " : "") +
                                   dims_name(rd, flash) + " ";
        expect_block_saved_close(prefix, sd, s, d);
        EXPECT_TRUE(guard_intact(slot_d.download(), saved_bytes))
            << prefix << "wrote past the saved slot";
      }
      expect_close_scaled(tag<T>("gpt2_block_forward", "out") + dims_name(rd, flash),
                          out_d.download(), out, layer_tol<T>());

      const int64_t plans = gpu_gemm_cache_plans(this->g.gemms);
      nan_vec<std::byte> slot_d(saved_bytes);
      const auto sd = gpt2_block_saved_at<T>(slot_d.get(), d);
      to_device(sd.input, x.data(), N * C);
      gpt2_block_forward(out_d.get(), p, sd, d, this->g);
      this->sync();
      EXPECT_EQ(gpu_gemm_cache_plans(this->g.gemms), plans) << "a repeated forward planned a GEMM";
    }
}

// Both sides run backward from the CPU forward's saved slot, with random
// gradients already accumulated (grads must be +=).
TYPED_TEST(CudaGpt2Backward, Block) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  for (const ref::dims& rd : kLayerDims)
    for (const bool flash : {false, true}) {
      const gpt2_dims d = layer_dims(rd, flash);
      const int64_t N = d.N(), C = d.C;
      std::mt19937 rng(800);
      const auto params = block_flat<T>(ref::random_block(rng, rd), rd);
      const auto x = random_stored<T>(rng, N * C);
      const auto dout = random_stored<T>(rng, N * C);
      const auto grads0 = random_stored<G>(rng, block_flat_elems(rd));
      const auto p = gpt2_block_params_at<T>(params.data(), d);

      const int64_t saved_bytes = gpt2_block_saved_bytes(d, sizeof(T));
      const int64_t scratch_bytes = gpt2_backward_scratch_bytes(d, sizeof(T));
      std::vector<std::byte> saved(saved_bytes), scratch(scratch_bytes);
      const auto s = gpt2_block_saved_at<T>(saved.data(), d);
      std::copy(x.begin(), x.end(), s.input);
      std::vector<T> out(N * C);
      gpt2_block_forward(out.data(), p, s, d, cpu_workspace());
      nan_vec<std::byte> saved_d(saved);  // the CPU forward's slot

      const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), d);
      std::copy(dout.begin(), dout.end(), sc.dres);
      std::vector<G> grads = grads0;
      gpt2_block_backward(gpt2_block_grads_at<G>(grads.data(), d), p, s, sc, d, cpu_workspace());

      nan_vec<T> params_d(params);
      nan_vec<G> grads_d(grads0);
      nan_vec<std::byte> scratch_d(scratch_bytes + kGuardBytes);
      const auto scd = gpt2_backward_scratch_at<T>(scratch_d.get(), d);
      to_device(scd.dres, dout.data(), N * C);
      gpt2_block_backward(gpt2_block_grads_at<G>(grads_d.get(), d),
                          gpt2_block_params_at<T>(params_d.get(), d),
                          gpt2_block_saved_at<T>(saved_d.get(), d), scd, d, this->g);
      this->sync();

      const std::string prefix = tag<T, G>("gpt2_block_backward", "") + dims_name(rd, flash) + " ";
      expect_close_scaled(prefix + "d(input)", load(from_device(scd.dres, N * C)),
                          load(sc.dres, N * C), layer_tol<T>());
      std::vector<G> got = grads_d.download();
      const auto got_ptrs = block_pointers(gpt2_block_grads_at<G>(got.data(), d));
      const auto want_ptrs = block_pointers(gpt2_block_grads_at<G>(grads.data(), d));
      const auto elems = block_tensor_elems(rd);
      for (size_t i = 0; i < elems.size(); i++)
        expect_close_scaled(prefix + ref::block_tensors()[i].name, load(got_ptrs[i], elems[i]),
                            load(want_ptrs[i], elems[i]), grad_tol<T, G>());
      EXPECT_TRUE(guard_intact(scratch_d.download(), scratch_bytes))
          << prefix << "wrote past the backward scratch";
    }
}

// The final norm and head's inputs: x (N, C), lnf_w, lnf_b (C), head_w (V,
// C) scaled so that logits stay within a few units, targets (N).
template <class T>
struct head_inputs {
  std::vector<T> x, lnf_w, lnf_b, head_w;
  std::vector<int32_t> targets;
};
template <class T>
head_inputs<T> random_head(std::mt19937& rng, const gpt2_dims& d) {
  head_inputs<T> h;
  h.x = random_stored<T>(rng, d.N() * d.C, 2.0, 0.5);
  h.lnf_w = random_stored<T>(rng, d.C, 0.2, 1.0);
  h.lnf_b = random_stored<T>(rng, d.C, 0.1);
  h.head_w = random_stored<T>(rng, d.V * d.C, 0.3);
  h.targets = ref::random_tokens(rng, d.N(), static_cast<int32_t>(d.V));
  return h;
}

// A dloss_scale other than 1 checks that the device value is applied.
constexpr float kDlossScale = 0.5f;

TYPED_TEST(CudaGpt2Layer, HeadForward) {
  using T = TypeParam;
  for (const ref::dims& rd : kLayerDims) {
    const gpt2_dims d = to_gpt2(rd);
    const int64_t N = d.N(), C = d.C, V = d.V;
    std::mt19937 rng(900);
    const head_inputs<T> h = random_head<T>(rng, d);
    const int64_t saved_bytes = gpt2_final_norm_saved_bytes(d, sizeof(T));
    std::vector<std::byte> saved(saved_bytes);
    const auto s = gpt2_final_norm_saved_at<T>(saved.data(), d);
    std::copy(h.x.begin(), h.x.end(), s.input);
    std::vector<T> logits(N * V);
    std::vector<float> losses(N);
    gpt2_head_forward(logits.data(), losses.data(), h.targets.data(), h.lnf_w.data(),
                      h.lnf_b.data(), h.head_w.data(), s, d, kDlossScale, cpu_workspace());

    nan_vec<std::byte> slot_d(saved_bytes + kGuardBytes);
    const auto sd = gpt2_final_norm_saved_at<T>(slot_d.get(), d);
    to_device(sd.input, h.x.data(), N * C);
    nan_vec<T> lnf_w_d(h.lnf_w), lnf_b_d(h.lnf_b), head_w_d(h.head_w), logits_d(N * V);
    nan_vec<int32_t> targets_d(h.targets);
    nan_vec<float> losses_d(N), scale_d(std::vector<float>{kDlossScale});
    gpt2_head_forward(logits_d.get(), losses_d.get(), targets_d.get(), lnf_w_d.get(), lnf_b_d.get(),
                      head_w_d.get(), sd, d, scale_d.get(), this->g);
    this->sync();

    const std::string prefix = tag<T>("gpt2_head_forward", "") + dims_name(rd) + " ";
    expect_close_scaled(prefix + "mean", load(from_device(sd.mean, N)), load(s.mean, N), kFp32Tol);
    expect_close_scaled(prefix + "rstd", load(from_device(sd.rstd, N)), load(s.rstd, N), kFp32Tol);
    expect_close_scaled(prefix + "output", load(from_device(sd.output, N * C)),
                        load(s.output, N * C), op_tol<T>());
    expect_close_scaled(prefix + "dlogits", logits_d.download(), logits, layer_tol<T>());
    if (is_bf16<T>)
      ref::expect_close(prefix + "losses", load(losses_d.download()), load(losses), kBf16LossTol);
    else
      expect_close_scaled(prefix + "losses", load(losses_d.download()), load(losses), kFp32Tol);
    EXPECT_TRUE(guard_intact(slot_d.download(), saved_bytes)) << prefix << "wrote past the slot";
  }
}

// Both sides run backward from the CPU forward's saved slot and dlogits.
TYPED_TEST(CudaGpt2Backward, Head) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  for (const ref::dims& rd : kLayerDims) {
    const gpt2_dims d = to_gpt2(rd);
    const int64_t N = d.N(), C = d.C, V = d.V;
    std::mt19937 rng(1000);
    const head_inputs<T> h = random_head<T>(rng, d);
    const auto dlnf_w0 = random_stored<G>(rng, C), dlnf_b0 = random_stored<G>(rng, C);
    const auto dhead_w0 = random_stored<G>(rng, V * C);
    const int64_t saved_bytes = gpt2_final_norm_saved_bytes(d, sizeof(T));
    const int64_t scratch_bytes = gpt2_backward_scratch_bytes(d, sizeof(T));
    std::vector<std::byte> saved(saved_bytes), scratch(scratch_bytes);
    const auto s = gpt2_final_norm_saved_at<T>(saved.data(), d);
    std::copy(h.x.begin(), h.x.end(), s.input);
    std::vector<T> logits(N * V);
    std::vector<float> losses(N);
    gpt2_head_forward(logits.data(), losses.data(), h.targets.data(), h.lnf_w.data(),
                      h.lnf_b.data(), h.head_w.data(), s, d, kDlossScale, cpu_workspace());
    const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), d);
    std::vector<G> dlnf_w = dlnf_w0, dlnf_b = dlnf_b0, dhead_w = dhead_w0;
    gpt2_head_backward(dlnf_w.data(), dlnf_b.data(), dhead_w.data(), h.lnf_w.data(),
                       h.head_w.data(), logits.data(), s, sc, d, cpu_workspace());

    nan_vec<std::byte> saved_d(saved), scratch_d(scratch_bytes + kGuardBytes);
    nan_vec<T> lnf_w_d(h.lnf_w), head_w_d(h.head_w), logits_d(logits);
    nan_vec<G> dlnf_w_d(dlnf_w0), dlnf_b_d(dlnf_b0), dhead_w_d(dhead_w0);
    const auto scd = gpt2_backward_scratch_at<T>(scratch_d.get(), d);
    gpt2_head_backward(dlnf_w_d.get(), dlnf_b_d.get(), dhead_w_d.get(), lnf_w_d.get(),
                       head_w_d.get(), logits_d.get(),
                       gpt2_final_norm_saved_at<T>(saved_d.get(), d), scd, d, this->g);
    this->sync();

    const std::string prefix = tag<T, G>("gpt2_head_backward", "") + dims_name(rd) + " ";
    expect_close_scaled(prefix + "d(input)", load(from_device(scd.dres, N * C)),
                        load(sc.dres, N * C), layer_tol<T>());
    expect_close_scaled(prefix + "dlnf_w", dlnf_w_d.download(), dlnf_w, grad_tol<T, G>());
    expect_close_scaled(prefix + "dlnf_b", dlnf_b_d.download(), dlnf_b, grad_tol<T, G>());
    expect_close_scaled(prefix + "dhead_w", dhead_w_d.download(), dhead_w, grad_tol<T, G>());
    EXPECT_TRUE(guard_intact(scratch_d.download(), scratch_bytes))
        << prefix << "wrote past the backward scratch";
  }
}

TYPED_TEST(CudaGpt2Layer, EmbedForward) {
  using T = TypeParam;
  for (const ref::dims& rd : kLayerDims) {
    const gpt2_dims d = to_gpt2(rd);
    const int64_t N = d.N(), C = d.C;
    std::mt19937 rng(1100);
    const auto tokens = ref::random_tokens(rng, N, static_cast<int32_t>(d.V));
    const auto wte = random_stored<T>(rng, d.V * C), wpe = random_stored<T>(rng, d.T * C);
    std::vector<T> out(N * C);
    gpt2_embed_forward(out.data(), tokens.data(), wte.data(), wpe.data(), d);

    nan_vec<T> out_d(N * C), wte_d(wte), wpe_d(wpe);
    nan_vec<int32_t> tokens_d(tokens);
    gpt2_embed_forward(out_d.get(), tokens_d.get(), wte_d.get(), wpe_d.get(), d, this->g);
    this->sync();
    ref::expect_close(tag<T>("gpt2_embed_forward", "out") + dims_name(rd), load(out_d.download()),
                      load(out), storage_tol<T>());
  }
}

TYPED_TEST(CudaGpt2Backward, Embed) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  for (const ref::dims& rd : kLayerDims) {
    const gpt2_dims d = to_gpt2(rd);
    const int64_t N = d.N(), C = d.C;
    std::mt19937 rng(1200);
    const auto tokens = ref::random_tokens(rng, N, static_cast<int32_t>(d.V));
    const auto dout = random_stored<T>(rng, N * C);
    auto dwte = random_stored<G>(rng, d.V * C), dwpe = random_stored<G>(rng, d.T * C);
    std::vector<std::byte> scratch(gpt2_backward_scratch_bytes(d, sizeof(T)));
    const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), d);
    std::copy(dout.begin(), dout.end(), sc.dres);

    nan_vec<std::byte> scratch_d(scratch);
    nan_vec<G> dwte_d(dwte), dwpe_d(dwpe);
    nan_vec<int32_t> tokens_d(tokens);
    gpt2_embed_backward(dwte_d.get(), dwpe_d.get(), tokens_d.get(),
                        gpt2_backward_scratch_at<T>(scratch_d.get(), d), d, this->g);
    this->sync();
    gpt2_embed_backward(dwte.data(), dwpe.data(), tokens.data(), sc, d);
    const std::string prefix = tag<T, G>("gpt2_embed_backward", "") + dims_name(rd) + " ";
    ref::expect_close(prefix + "dwte", load(dwte_d.download()), load(dwte), storage_tol<G>());
    ref::expect_close(prefix + "dwpe", load(dwpe_d.download()), load(dwpe), storage_tol<G>());
  }
}

}  // namespace
