// CudaGemmTest: runtime/cuda/gemm.h (cuda_gemm with its extras and
// epilogues, and the bias gradient's column sums) against the CPU's gemm
// (runtime/cpu/gemm.h), its GELU kernels (runtime/cpu/kernels.h) or double-precision
// sums of the same random stored inputs (fixed seeds), for fp32, bf16 and
// fp16 storage and gradients, printing the largest absolute and relative
// differences. Tolerances and fixtures: Gpt2Cases.h.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/gemm.h"
#include "tests/cuda/Gpt2Cases.h"
#include "tests/runtime/Reference.h"

using ref::tag;

namespace gpt2_cases {
namespace {

class CudaGemm : public Gpt2Fixture {};

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

}  // namespace
}  // namespace gpt2_cases
