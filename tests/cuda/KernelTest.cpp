// KernelTest (cuda): every CUDA kernel of runtime/cuda/kernels.cuh against
// its CPU counterpart (runtime/cpu/kernels.h, optimizer_adamw,
// step_add_grad_norm) on the same random inputs (fixed seeds), for fp32, bf16
// and fp16 storage and gradients, printing the largest absolute and relative
// differences. Each test skips, saying why, where no CUDA device is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "../runtime/Reference.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/step.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/optimizer.h"
#include "tests/cuda/Device.h"

using ref::load;
using ref::random_vec;
using ref::store;
using ref::vec;

namespace {

// Tolerances: |cuda - cpu| <= atol + rtol * |cpu|. Both sides read the same
// stored inputs and compute in fp32; they differ only in summation order
// (warp and block trees against sequential loops), expf against the CPU's
// polynomial exp (each within ~2 ulp) and FMA contraction: a few fp32 ulps of
// the terms summed.
//  - fp32 storage: 1e-5 absolute and relative. Data are of unit scale and
//    sums have at most ~2000 terms, so differences are ~1e-6.
//  - bf16 storage: differences of a few fp32 ulps can round to neighbouring
//    bf16 values, one bf16 ulp apart (at most 2^-7 ~ 7.8e-3 relative): 1e-2
//    relative, and 1e-5 absolute for the fp32 difference itself. fp16 (one
//    ulp is 2^-10 relative) takes the same bound, 8x looser than it needs.
//  - Always-fp32 outputs (LayerNorm's mean and rstd, losses, the sum of
//    squares) take the fp32 tolerance whatever the storage.
//  - Cross-entropy's gradients are probabilities of ~1e-3 (V ~ 1000): the
//    absolute part is 1e-8 so that it does not hide relative errors.
//  - AdamW (fp32 master weights and state; updates ~ lr = 1e-2): 1e-6,
//    still ten times the FMA-contraction differences (~1e-7).
//  - encoder_forward/backward and residual_forward do the same fp32
//    additions in the same order on both sides and are expected to match
//    exactly; they get the storage tolerance all the same.
using ref::tag;
using ref::tolerance;
constexpr tolerance kFp32Tol{1e-5, 1e-5};
template <class T>
tolerance storage_tol() {
  return sizeof(T) == 4 ? kFp32Tol : tolerance{1e-5, 1e-2};
}
// A sum over many rows that cancels (LayerNorm's dweight and dbias: columns
// of N terms): fp32 sums in different orders differ by a few ulps of the
// terms' magnitudes summed (terms_sum), however small the result. On an H100
// (2026-11-26) N = 1000 rows differed by 1.3e-5, a fraction of an ulp of a
// column's magnitudes summed (a few hundred); the bound is 4 ulps of it, the
// storage tolerance where that is looser. A row left out or counted twice moves a column by
// a whole term (~0.5).
template <class T>
tolerance column_sum_tol(double terms_sum) {
  const tolerance s = storage_tol<T>();
  return tolerance{std::max(s.atol, 4.0 * std::numeric_limits<float>::epsilon() * terms_sum),
                   s.rtol};
}
template <class T>
tolerance cross_entropy_tol() {
  return tolerance{1e-8, storage_tol<T>().rtol};
}
constexpr tolerance kAdamwTol{1e-6, 1e-6};

template <class T>
void expect_close(const std::string& what, const std::vector<T>& cuda, const std::vector<T>& cpu,
                  tolerance tol) {
  ref::expect_close(what, load(cuda), load(cpu), tol);
}

using StorageTypes = ::testing::Types<float, bf16, fp16>;
template <class T>
class CudaKernel : public CudaFixture {};
TYPED_TEST_SUITE(CudaKernel, StorageTypes, ref::StorageTypeNames);
template <class P>
class CudaParamBackward : public CudaFixture {};
using StorageGradTypes =
    ::testing::Types<ref::storage_grad<float, float>, ref::storage_grad<float, bf16>,
                     ref::storage_grad<bf16, float>, ref::storage_grad<bf16, bf16>,
                     ref::storage_grad<float, fp16>, ref::storage_grad<fp16, float>,
                     ref::storage_grad<fp16, fp16>>;
TYPED_TEST_SUITE(CudaParamBackward, StorageGradTypes, ref::StorageGradNames);

template <class T>
std::vector<T> random_stored(std::mt19937& rng, int64_t n, double scale = 1.0,
                             double offset = 0.0) {
  return store<T>(random_vec(rng, n, scale, offset));
}

template <class T>
dtype_id dtype_of() {
  return sizeof(T) == 4            ? dtype_id::fp32
         : std::is_same_v<T, fp16> ? dtype_id::fp16
                                   : dtype_id::bf16;
}

// ---------------------------------------------------------------- encoder

TYPED_TEST(CudaKernel, EncoderForward) {
  using T = TypeParam;
  const int64_t B = 3, T_ = 37, C = 100, V = 50;
  std::mt19937 rng(1);
  const auto tokens = ref::random_tokens(rng, B * T_, V);
  const auto wte = random_stored<T>(rng, V * C), wpe = random_stored<T>(rng, T_ * C);
  std::vector<T> want(B * T_ * C);
  encoder_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T_, C);

  device_vec<T> out(B * T_ * C), wte_d(wte), wpe_d(wpe);
  device_vec<int32_t> tokens_d(tokens);
  encoder_forward(out.get(), tokens_d.get(), wte_d.get(), wpe_d.get(), B, T_, C, this->stream);
  this->sync();
  expect_close(tag<T>("encoder_forward", "out"), out.download(), want, storage_tol<T>());
}

// dwte through the sort (scratch enough for it) and through the walk over
// positions (no scratch, or too little): each against the CPU kernel, and
// the two bit for bit (they add in the same order). N = 1200 positions span
// two chunks of staged tokens; V = 50 repeats every token many times, so a
// bf16 dwte's per-occurrence rounding order matters; V = 3 makes runs of
// hundreds of rows, longer than the rows a block loads ahead.
TYPED_TEST(CudaParamBackward, Encoder) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  const int64_t B = 4, T_ = 300, C = 70;
  for (const int64_t V : {50, 3}) {
    std::mt19937 rng(2);
    const auto tokens = ref::random_tokens(rng, B * T_, V);
    const auto dout = random_stored<T>(rng, B * T_ * C);
    const auto dwte0 = random_stored<G>(rng, V * C), dwpe0 = random_stored<G>(rng, T_ * C);
    auto dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T_, C);

    const int64_t sort_bytes = 16 * B * T_ + (1 << 20);
    std::vector<std::vector<G>> got;
    for (const int64_t scratch_bytes : {int64_t{0}, 16 * B * T_, sort_bytes}) {
      device_vec<G> dwte_d(dwte0), dwpe_d(dwpe0);
      device_vec<T> dout_d(dout);
      device_vec<int32_t> tokens_d(tokens);
      device_vec<std::byte> scratch(std::max<int64_t>(scratch_bytes, 1));
      encoder_backward(dwte_d.get(), dwpe_d.get(), dout_d.get(), tokens_d.get(), B, T_, C,
                       scratch_bytes ? static_cast<void*>(scratch.get()) : nullptr, scratch_bytes,
                       this->stream);
      this->sync();
      const std::string what =
          " V=" + std::to_string(V) + " scratch " + std::to_string(scratch_bytes) + " bytes";
      expect_close(tag<T, G>("encoder_backward", "dwte") + what, dwte_d.download(), dwte,
                   storage_tol<G>());
      expect_close(tag<T, G>("encoder_backward", "dwpe") + what, dwpe_d.download(), dwpe,
                   storage_tol<G>());
      got.push_back(dwte_d.download());
    }
    for (size_t k = 1; k < got.size(); k++)
      EXPECT_EQ(0, std::memcmp(got[0].data(), got[k].data(), got[0].size() * sizeof(G)))
          << tag<T, G>("encoder_backward", "dwte") << " V=" << V
          << ": the sorted and walking kernels differ";
  }
}

// ---------------------------------------------------------------- layernorm

struct rows_channels {
  int64_t N, C;
};
// Row counts that are not multiples of a block's rows; C below, at and above
// a warp's multiple. The packed kernels (16-byte packs, at most 8 per lane)
// take C = 32, 768 and (16-bit) 1600 and 2048 with aligned rows; the others
// take the scalar ones: odd C = 37, C = 100 for 16-bit (not whole packs),
// C = 1600 and 2048 for fp32 and C = 2056 (more than 8 packs per lane).
constexpr rows_channels kLayernormShapes[] = {{67, 100}, {9, 32},   {5, 1600}, {33, 768},
                                              {7, 2048}, {4, 2056}, {11, 37}};
// Rows enough for several chunks of the parameter gradients' column sums
// (kLayerNormParamRowsPerChunk each, the last one short).
constexpr rows_channels kLayernormChunkedShapes[] = {{1000, 768}, {600, 37}};
// Element offsets of the row arrays: 1 makes every pointer 2 or 4 bytes off
// 16-byte alignment, so the scalar kernels run whatever C.
constexpr int64_t kRowOffsets[] = {0, 1};

// v after `offset` zeros: a device copy whose data start `offset` elements in.
template <class T>
std::vector<T> after(int64_t offset, const std::vector<T>& v) {
  std::vector<T> out(offset, T{});
  out.insert(out.end(), v.begin(), v.end());
  return out;
}
// The values a device array holds after its first `offset` elements.
template <class T>
std::vector<T> from(int64_t offset, const device_vec<T>& d) {
  const std::vector<T> all = d.download();
  return std::vector<T>(all.begin() + offset, all.end());
}

TYPED_TEST(CudaKernel, LayernormForward) {
  using T = TypeParam;
  for (const auto [N, C] : kLayernormShapes)
    for (const int64_t off : kRowOffsets) {
      std::mt19937 rng(3);
      const auto x = random_stored<T>(rng, N * C, 2.0, 0.5);
      const auto w = random_stored<T>(rng, C, 0.3, 1.0), b = random_stored<T>(rng, C, 0.2);
      std::vector<T> want(N * C);
      std::vector<float> want_mean(N), want_rstd(N);
      layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), x.data(), w.data(),
                        b.data(), N, C);

      device_vec<T> out(off + N * C), x_d(after(off, x)), w_d(w), b_d(b);
      device_vec<float> mean(N), rstd(N);
      layernorm_forward(out.get() + off, mean.get(), rstd.get(), x_d.get() + off, w_d.get(),
                        b_d.get(), N, C, this->stream);
      this->sync();
      const std::string shape =
          " N=" + std::to_string(N) + " C=" + std::to_string(C) + (off ? " (misaligned rows)" : "");
      expect_close(tag<T>("layernorm_forward", "out") + shape, from(off, out), want,
                   storage_tol<T>());
      expect_close(tag<T>("layernorm_forward", "mean") + shape, mean.download(), want_mean,
                   kFp32Tol);
      expect_close(tag<T>("layernorm_forward", "rstd") + shape, rstd.download(), want_rstd,
                   kFp32Tol);
    }
}

// Mean and rstd come from the CPU forward and feed both sides; dinp is
// checked overwritten and accumulated. The parameter gradients' column sums
// run without scratch, with room for two chunks of rows, and with room for
// every chunk.
template <class T, class G>
void check_layernorm_backward(int64_t N, int64_t C, int64_t off, bool accumulate,
                              int64_t scratch_floats, cudaStream_t stream) {
  std::mt19937 rng(4);
  const auto x = random_stored<T>(rng, N * C, 2.0, 0.5);
  const auto w = random_stored<T>(rng, C, 0.3, 1.0), b = random_stored<T>(rng, C, 0.2);
  const auto dout = random_stored<T>(rng, N * C);
  auto dinp = random_stored<T>(rng, N * C);
  auto dw = random_stored<G>(rng, C), db = random_stored<G>(rng, C);
  std::vector<T> out(N * C);
  std::vector<float> mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);

  device_vec<T> dinp_d(after(off, dinp)), dout_d(after(off, dout)), x_d(after(off, x)), w_d(w);
  device_vec<G> dw_d(dw), db_d(db);
  device_vec<float> mean_d(mean), rstd_d(rstd), scratch(std::max<int64_t>(scratch_floats, 1));
  layernorm_backward(dinp_d.get() + off, dw_d.get(), db_d.get(), dout_d.get() + off,
                     x_d.get() + off, w_d.get(), mean_d.get(), rstd_d.get(), N, C, accumulate,
                     scratch_floats ? scratch.get() : nullptr, scratch_floats, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C, accumulate);
  const std::string shape = " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                            (accumulate ? " +=" : "") + (off ? " (misaligned rows)" : "") +
                            " scratch " + std::to_string(scratch_floats) + " floats";
  expect_close(tag<T, G>("layernorm_backward", "dinp") + shape, from(off, dinp_d), dinp,
               storage_tol<T>());
  // The column sums cancel (dweight ~0.03 from 1000 terms of ~0.5): their
  // summation-order difference is a few ulps of the terms' magnitudes summed,
  // not of the result.
  const vec dout_v = load(dout), x_v = load(x);
  double dw_terms = 0, db_terms = 0;
  for (int64_t c = 0; c < C; c++) {
    double w_col = 0, b_col = 0;
    for (int64_t n = 0; n < N; n++) {
      const double d = dout_v[n * C + c];
      const double xhat = (x_v[n * C + c] - mean[n]) * rstd[n];
      w_col += std::fabs(d * xhat);
      b_col += std::fabs(d);
    }
    dw_terms = std::max(dw_terms, w_col);
    db_terms = std::max(db_terms, b_col);
  }
  expect_close(tag<T, G>("layernorm_backward", "dweight") + shape, dw_d.download(), dw,
               column_sum_tol<G>(dw_terms));
  expect_close(tag<T, G>("layernorm_backward", "dbias") + shape, db_d.download(), db,
               column_sum_tol<G>(db_terms));
}

TYPED_TEST(CudaParamBackward, Layernorm) {
  using T = typename TypeParam::T;
  using G = typename TypeParam::G;
  for (const auto [N, C] : kLayernormShapes)
    for (const int64_t off : kRowOffsets)
      for (const bool accumulate : {false, true})
        check_layernorm_backward<T, G>(N, C, off, accumulate, 0, this->stream);
  for (const auto [N, C] : kLayernormChunkedShapes)
    for (const int64_t floats : {int64_t{0}, 2 * 2 * C, 2 * C * N})
      check_layernorm_backward<T, G>(N, C, 0, true, floats, this->stream);
}

// ---------------------------------------------------------------- elementwise

// Unit-scale values plus large ones, where exp's argument is clamped.
template <class T>
std::vector<T> gelu_inputs(std::mt19937& rng, int64_t n) {
  vec x = random_vec(rng, n, 3.0);
  const double large[] = {-50.0, -20.0, -10.0, 10.0, 20.0, 50.0};
  for (size_t i = 0; i < std::size(large); i++)
    x[i * 97] = large[i];
  return store<T>(x);
}

TYPED_TEST(CudaKernel, GeluForward) {
  using T = TypeParam;
  const int64_t n = 10007;
  std::mt19937 rng(5);
  const auto x = gelu_inputs<T>(rng, n);
  std::vector<T> want(n);
  gelu_forward(want.data(), x.data(), n);

  device_vec<T> out(n), x_d(x);
  gelu_forward(out.get(), x_d.get(), n, this->stream);
  gelu_forward(x_d.get(), x_d.get(), n, this->stream);  // in place
  this->sync();
  expect_close(tag<T>("gelu_forward", "out"), out.download(), want, storage_tol<T>());
  expect_close(tag<T>("gelu_forward", "out (in place)"), x_d.download(), want, storage_tol<T>());
}

TYPED_TEST(CudaKernel, GeluBackward) {
  using T = TypeParam;
  const int64_t n = 10007;
  std::mt19937 rng(6);
  const auto x = gelu_inputs<T>(rng, n);
  const auto dout = random_stored<T>(rng, n);
  std::vector<T> want(n);
  gelu_backward(want.data(), x.data(), dout.data(), n);

  device_vec<T> dinp(n), x_d(x), dout_d(dout);
  gelu_backward(dinp.get(), x_d.get(), dout_d.get(), n, this->stream);
  gelu_backward(dout_d.get(), x_d.get(), dout_d.get(), n, this->stream);  // in place
  this->sync();
  expect_close(tag<T>("gelu_backward", "dinp"), dinp.download(), want, storage_tol<T>());
  expect_close(tag<T>("gelu_backward", "dinp (in place)"), dout_d.download(), want,
               storage_tol<T>());
}

TYPED_TEST(CudaKernel, ResidualForward) {
  using T = TypeParam;
  const int64_t n = 10007;
  std::mt19937 rng(7);
  const auto a = random_stored<T>(rng, n), b = random_stored<T>(rng, n);
  std::vector<T> want(n);
  residual_forward(want.data(), a.data(), b.data(), n);

  device_vec<T> out(n), a_d(a), b_d(b);
  residual_forward(out.get(), a_d.get(), b_d.get(), n, this->stream);
  residual_forward(a_d.get(), a_d.get(), b_d.get(), n, this->stream);  // out aliases a
  this->sync();
  expect_close(tag<T>("residual_forward", "out"), out.download(), want, storage_tol<T>());
  expect_close(tag<T>("residual_forward", "out (aliasing a)"), a_d.download(), want,
               storage_tol<T>());
}

// ---------------------------------------------------------------- cross-entropy

// V = 1031 spans a block's 512 threads twice and a bit.
TYPED_TEST(CudaKernel, CrossEntropyFused) {
  using T = TypeParam;
  const int64_t N = 9, V = 1031;
  const float dloss_scale = 0.5f;
  std::mt19937 rng(8);
  auto logits = random_stored<T>(rng, N * V, 4.0);
  const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));

  device_vec<T> logits_d(logits);
  device_vec<int32_t> targets_d(targets);
  device_vec<float> losses_d(N);
  cross_entropy_fused(logits_d.get(), losses_d.get(), targets_d.get(), N, V, V, dloss_scale, 0.0f,
                      this->stream);
  this->sync();
  std::vector<float> losses(N);
  cross_entropy_fused(logits.data(), losses.data(), targets.data(), N, V, V, dloss_scale);
  expect_close(tag<T>("cross_entropy_fused", "losses"), losses_d.download(), losses, kFp32Tol);
  expect_close(tag<T>("cross_entropy_fused", "dlogits"), logits_d.download(), logits,
               cross_entropy_tol<T>());
}

// Rows of a padded vocabulary, V = 1031 of Vp = 1152 (a multiple of 128, as
// the plan pads): the padded columns hold values that would dominate the max
// and the sum if they took part. Against the CPU kernel on the same padded
// rows (the same tolerances as above), whose padded columns end zero; the
// GPU's must be exactly zero.
TYPED_TEST(CudaKernel, CrossEntropyFusedPaddedVocab) {
  using T = TypeParam;
  const int64_t N = 9, V = 1031, Vp = 1152;
  const float dloss_scale = 0.5f;
  std::mt19937 rng(9);
  auto logits = random_stored<T>(rng, N * Vp, 4.0);
  for (int64_t n = 0; n < N; ++n)
    std::fill(logits.begin() + n * Vp + V, logits.begin() + (n + 1) * Vp, from_float<T>(40.0f));
  const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));

  device_vec<T> logits_d(logits);
  device_vec<int32_t> targets_d(targets);
  device_vec<float> losses_d(N);
  cross_entropy_fused(logits_d.get(), losses_d.get(), targets_d.get(), N, V, Vp, dloss_scale, 0.0f,
                      this->stream);
  this->sync();
  std::vector<float> losses(N);
  cross_entropy_fused(logits.data(), losses.data(), targets.data(), N, V, Vp, dloss_scale);
  const std::vector<T> got = logits_d.download();
  expect_close(tag<T>("cross_entropy_fused padded", "losses"), losses_d.download(), losses,
               kFp32Tol);
  expect_close(tag<T>("cross_entropy_fused padded", "dlogits"), got, logits,
               cross_entropy_tol<T>());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = V; v < Vp; ++v)
      ASSERT_EQ(to_float(got[static_cast<size_t>(n * Vp + v)]), 0.0f)
          << "row " << n << " column " << v;
}

// Gemma 2's logit soft-cap against the CPU kernel: logits uniform in [-16,
// 16], past the cap 3 everywhere it matters and where 30 bends them (the
// softmax sees X tanh(l / X), the gradient its slope), on rows read one
// column at a time (V = 1031) and in 16-byte packs (Vp = 1152, where
// aligned).
TYPED_TEST(CudaKernel, CrossEntropyFusedSoftcap) {
  using T = TypeParam;
  const int64_t N = 9, V = 1031;
  const float dloss_scale = 0.5f;
  for (const int64_t Vp : {V, int64_t{1152}})
    for (const float X : {3.0f, 30.0f}) {
      std::mt19937 rng(10);
      auto logits = random_stored<T>(rng, N * Vp, 16.0);
      const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));
      device_vec<T> logits_d(logits);
      device_vec<int32_t> targets_d(targets);
      device_vec<float> losses_d(N);
      cross_entropy_fused(logits_d.get(), losses_d.get(), targets_d.get(), N, V, Vp, dloss_scale, X,
                          this->stream);
      this->sync();
      std::vector<float> losses(N);
      cross_entropy_fused(logits.data(), losses.data(), targets.data(), N, V, Vp, dloss_scale, X);
      const std::string what =
          "cross_entropy_fused softcap " + std::to_string(X) + " Vp=" + std::to_string(Vp);
      expect_close(tag<T>(what.c_str(), "losses"), losses_d.download(), losses, kFp32Tol);
      expect_close(tag<T>(what.c_str(), "dlogits"), logits_d.download(), logits,
                   cross_entropy_tol<T>());
    }
}

// ---------------------------------------------------------------- optimizer and norm

// A shard range inside larger buffers (values outside it must not change), a
// step past the first (bias corrections), with and without weight decay.
TYPED_TEST(CudaKernel, Adamw) {
  using G = TypeParam;
  const int64_t n = 10000, begin = 123, end = 9001, t = 3;
  const float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f, scale = 0.7f;
  for (const bool decay : {false, true}) {
    std::mt19937 rng(9);
    auto master = store<float>(random_vec(rng, n));
    auto m = store<float>(random_vec(rng, n, 0.1));
    auto v = store<float>(random_vec(rng, n, 0.01, 0.01));
    const auto grad = random_stored<G>(rng, n);

    device_vec<float> master_d(master), m_d(m), v_d(v);
    device_vec<G> grad_d(grad);
    optimizer_adamw(master_d.get(), m_d.get(), v_d.get(), grad_d.get(), dtype_of<G>(), begin, end,
                    lr, beta1, beta2, eps, wd, decay, t, scale, this->stream);
    this->sync();
    optimizer_adamw(master.data(), m.data(), v.data(), grad.data(), dtype_of<G>(), begin, end, lr,
                    beta1, beta2, eps, wd, decay, t, scale);
    const std::string what = decay ? " (decay)" : "";
    expect_close(tag<G>("optimizer_adamw", "master") + what, master_d.download(), master,
                 kAdamwTol);
    expect_close(tag<G>("optimizer_adamw", "m") + what, m_d.download(), m, kAdamwTol);
    expect_close(tag<G>("optimizer_adamw", "v") + what, v_d.download(), v, kAdamwTol);
  }
}

// n exceeds the threads of the largest grid, so threads loop; the result is
// added to what the sum already holds.
TYPED_TEST(CudaKernel, SumSquares) {
  using G = TypeParam;
  const int64_t n = 1000003;
  const float initial = 1.5f;
  std::mt19937 rng(10);
  const auto x = random_stored<G>(rng, n);
  step_context c;
  c.grad_norm_partial = initial;
  step_add_grad_norm(c, x.data(), dtype_of<G>(), n);

  device_vec<G> x_d(x);
  device_vec<float> sum_d(std::vector<float>{initial});
  device_vec<float> scratch(kSumSquaresScratchFloats);
  cuda_sum_squares(sum_d.get(), scratch.get(), x_d.get(), dtype_of<G>(), n, this->stream);
  this->sync();
  expect_close(tag<G>("cuda_sum_squares", "sum"), sum_d.download(),
               std::vector<float>{c.grad_norm_partial}, kFp32Tol);
}

}  // namespace
