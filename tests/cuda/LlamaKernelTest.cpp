// LlamaKernelTest (cuda): the llama family's CUDA kernels (RMSNorm, SwiGLU,
// rotary positions, grouped-query flash attention with its window, scale and
// soft-cap) against their CPU twins
// (runtime/cpu/kernels.h, runtime/rope.h), which tests/runtime/LlamaKernelTest.cpp
// and RopeTest.cpp check against double references, on the same random
// inputs, for fp32, bf16 and fp16 storage. Each test skips, saying why, where no CUDA device
// is present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "../runtime/Reference.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/kernels.cuh"
#include "runtime/rope.h"
#include "tests/cuda/Device.h"

namespace {

using ref::load;
using ref::random_vec;
using ref::store;
using ref::tag;
using ref::tolerance;

// CUDA against CPU: fp32 differs in summation order (1e-5); 16-bit values
// differ by a rounding of one side's fp32 result (relative 2^-8 for bf16,
// looser than fp16's 2^-11: 1e-2 serves both), as in tests/cuda/KernelTest.cpp.
template <class T>
tolerance storage_tol() {
  return sizeof(T) == 4 ? tolerance{1e-5, 1e-5} : tolerance{1e-5, 1e-2};
}
// Attention's backward sums many products of rounded values: 16-bit absolute
// differences up to a few 1e-3 on unit-scale data.
template <class T>
tolerance attention_tol() {
  return sizeof(T) == 4 ? tolerance{1e-5, 1e-4} : tolerance{2e-2, 2e-2};
}

template <class T>
void expect_close(const std::string& what, const std::vector<T>& cuda, const std::vector<T>& cpu,
                  tolerance tol) {
  ref::expect_close(what, load(cuda), load(cpu), tol);
}

template <class T>
std::vector<T> random_stored(std::mt19937& rng, int64_t n, double scale = 1.0,
                             double offset = 0.0) {
  return store<T>(random_vec(rng, n, scale, offset));
}

using StorageTypes = ::testing::Types<float, bf16, fp16>;
template <class T>
class CudaLlamaKernel : public CudaFixture {};
TYPED_TEST_SUITE(CudaLlamaKernel, StorageTypes, ref::StorageTypeNames);

// Rows of C = 768 (whole 16-byte packs, the packed kernels) and C = 100 (the
// scalar ones); N = 600 rows with scratch for 3 chunks of the weight's column
// sums, and without; weights scaling as they are and (Gemma's) as 1 + weight.
TYPED_TEST(CudaLlamaKernel, Rmsnorm) {
  using T = TypeParam;
  for (const int64_t C : {int64_t{768}, int64_t{100}})
    for (const int64_t scratch_floats : {int64_t{0}, 3 * 2 * C})
      for (const float offset : {0.0f, 1.0f}) {
        const int64_t N = 600;
        std::mt19937 rng(11);
        const auto x = random_stored<T>(rng, N * C, 2.0), w = random_stored<T>(rng, C, 0.3, 1.0);
        const auto dout = random_stored<T>(rng, N * C);
        auto dinp = random_stored<T>(rng, N * C);
        auto dw = random_stored<float>(rng, C);
        std::vector<T> out(N * C);
        std::vector<float> rstd(N);
        rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f, offset);
        device_vec<T> out_d(N * C), x_d(x), w_d(w), dout_d(dout), dinp_d(dinp);
        device_vec<float> rstd_d(N), dw_d(dw), scratch(std::max<int64_t>(scratch_floats, 1));
        rmsnorm_forward(out_d.get(), rstd_d.get(), x_d.get(), w_d.get(), N, C, 1e-5f, offset,
                        this->stream);
        rmsnorm_backward(dinp_d.get(), dw_d.get(), dout_d.get(), x_d.get(), w_d.get(), rstd_d.get(),
                         N, C, true, offset, scratch_floats ? scratch.get() : nullptr,
                         scratch_floats, this->stream);
        this->sync();
        rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C,
                         true, offset);
        const std::string shape = " C=" + std::to_string(C) + " scratch " +
                                  std::to_string(scratch_floats) + " offset " +
                                  std::to_string(offset);
        expect_close(tag<T>("rmsnorm_forward", "out") + shape, out_d.download(), out,
                     storage_tol<T>());
        expect_close(tag<T>("rmsnorm_forward", "rstd") + shape, rstd_d.download(), rstd,
                     storage_tol<float>());
        expect_close(tag<T>("rmsnorm_backward", "dinp +=") + shape, dinp_d.download(), dinp,
                     storage_tol<T>());
        expect_close(tag<T>("rmsnorm_backward", "dweight +=") + shape, dw_d.download(), dw,
                     tolerance{1e-4, 1e-4});
      }
}

// A recompute's forward (out == nullptr) writes the statistics alone.
TYPED_TEST(CudaLlamaKernel, RmsnormStatisticsOnly) {
  using T = TypeParam;
  for (const int64_t C : {int64_t{768}, int64_t{100}}) {
    const int64_t N = 40;
    std::mt19937 rng(15);
    const auto x = random_stored<T>(rng, N * C, 2.0), w = random_stored<T>(rng, C, 0.3, 1.0);
    std::vector<T> out(N * C);
    std::vector<float> rstd(N);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f, 1.0f);
    device_vec<T> x_d(x), w_d(w);
    device_vec<float> rstd_d(N, 0x7f);
    rmsnorm_forward(static_cast<T*>(nullptr), rstd_d.get(), x_d.get(), w_d.get(), N, C, 1e-6f, 1.0f,
                    this->stream);
    this->sync();
    expect_close(tag<T>("rmsnorm_forward", "rstd, out null") + " C=" + std::to_string(C),
                 rstd_d.download(), rstd, storage_tol<float>());
  }
}

TYPED_TEST(CudaLlamaKernel, Swiglu) {
  using T = TypeParam;
  const int64_t n = 1000;
  std::mt19937 rng(12);
  const auto g = random_stored<T>(rng, n, 4.0), u = random_stored<T>(rng, n);
  const auto dout = random_stored<T>(rng, n);
  std::vector<T> out(n), dg(n), du(n);
  swiglu_forward(out.data(), g.data(), u.data(), n);
  swiglu_backward(dg.data(), du.data(), dout.data(), g.data(), u.data(), n);
  device_vec<T> g_d(g), u_d(u), dout_d(dout), out_d(n), dg_d(n), du_d(n);
  swiglu_forward(out_d.get(), g_d.get(), u_d.get(), n, this->stream);
  swiglu_backward(dg_d.get(), du_d.get(), dout_d.get(), g_d.get(), u_d.get(), n, this->stream);
  this->sync();
  expect_close(tag<T>("swiglu_forward", "out"), out_d.download(), out, storage_tol<T>());
  expect_close(tag<T>("swiglu_backward", "dgate"), dg_d.download(), dg, storage_tol<T>());
  expect_close(tag<T>("swiglu_backward", "dup"), du_d.download(), du, storage_tol<T>());
}

// Gemma's GeGLU, gates reaching GELU's flat and steep parts.
TYPED_TEST(CudaLlamaKernel, Geglu) {
  using T = TypeParam;
  const int64_t n = 1000;
  std::mt19937 rng(16);
  const auto g = random_stored<T>(rng, n, 4.0), u = random_stored<T>(rng, n);
  const auto dout = random_stored<T>(rng, n);
  std::vector<T> out(n), dg(n), du(n);
  geglu_forward(out.data(), g.data(), u.data(), n);
  geglu_backward(dg.data(), du.data(), dout.data(), g.data(), u.data(), n);
  device_vec<T> g_d(g), u_d(u), dout_d(dout), out_d(n), dg_d(n), du_d(n);
  geglu_forward(out_d.get(), g_d.get(), u_d.get(), n, this->stream);
  geglu_backward(dg_d.get(), du_d.get(), dout_d.get(), g_d.get(), u_d.get(), n, this->stream);
  this->sync();
  expect_close(tag<T>("geglu_forward", "out"), out_d.download(), out, storage_tol<T>());
  expect_close(tag<T>("geglu_backward", "dgate"), dg_d.download(), dg, storage_tol<T>());
  expect_close(tag<T>("geglu_backward", "dup"), du_d.download(), du, storage_tol<T>());
}

// The same fp32 tables on both sides (Llama 3.1 scaling), rows past one sequence.
TYPED_TEST(CudaLlamaKernel, Rope) {
  using T = TypeParam;
  const int64_t B = 3, T_ = 37, N = B * T_, heads = 4, D = 64;
  std::vector<float> cos(T_ * D / 2), sin(T_ * D / 2);
  rope_tables(cos.data(), sin.data(), T_, D, 500000.0, {8.0, 1.0, 4.0, 64});
  std::mt19937 rng(13);
  auto x = random_stored<T>(rng, N * heads * D), dx = random_stored<T>(rng, N * heads * D);
  device_vec<T> x_d(x), dx_d(dx);
  device_vec<float> cos_d(cos), sin_d(sin);
  rope_forward(x_d.get(), cos_d.get(), sin_d.get(), N, T_, heads, D, this->stream);
  rope_backward(dx_d.get(), cos_d.get(), sin_d.get(), N, T_, heads, D, this->stream);
  this->sync();
  rope_forward(x.data(), cos.data(), sin.data(), N, T_, heads, D);
  rope_backward(dx.data(), cos.data(), sin.data(), N, T_, heads, D);
  expect_close(tag<T>("rope_forward", "x"), x_d.download(), x, storage_tol<T>());
  expect_close(tag<T>("rope_backward", "dx"), dx_d.download(), dx, storage_tol<T>());
}

struct gqa_shape {
  int64_t B, T, H, KV, hs;
};
// T past one 32-query tile and not a multiple of it; groups of 4, 2 and 1;
// head sizes of 1 to 4 32-column chunks (64 and 128 are llama's).
constexpr gqa_shape kGqaShapes[] = {
    {2, 45, 8, 2, 64}, {1, 70, 4, 1, 128}, {2, 33, 4, 4, 32}, {1, 100, 6, 3, 96}};

// The flash kernels' grouped-query forward and backward with options o
// against the CPU's on the same inputs (q and k scaled by qk_scale); outputs
// start as garbage (every value must be written).
template <class T>
void expect_gqa_matches_cpu(const gqa_shape& a, const attention_options& o, double qk_scale,
                            cudaStream_t stream) {
  const int64_t N = a.B * a.T, C = a.H * a.hs, KVW = a.KV * a.hs, rows = a.B * a.H * a.T;
  std::mt19937 rng(14);
  const auto q = random_stored<T>(rng, N * C, qk_scale),
             k = random_stored<T>(rng, N * KVW, qk_scale);
  const auto v = random_stored<T>(rng, N * KVW), dout = random_stored<T>(rng, N * C);
  std::vector<T> out(N * C), dq(N * C), dk(N * KVW), dv(N * KVW);
  std::vector<float> lse(rows), delta(rows);
  attention_gqa_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), a.B, a.T, a.H, a.KV,
                        a.hs, o);
  attention_gqa_backward(dq.data(), dk.data(), dv.data(), delta.data(), dout.data(), q.data(),
                         k.data(), v.data(), out.data(), lse.data(), a.B, a.T, a.H, a.KV, a.hs, o);
  device_vec<T> q_d(q), k_d(k), v_d(v), dout_d(dout), out_d(N * C, 0x7f), dq_d(N * C, 0x7f),
      dk_d(N * KVW, 0x7f), dv_d(N * KVW, 0x7f);
  device_vec<float> lse_d(rows, 0x7f), delta_d(rows, 0x7f);
  gpu_exec g;
  g.stream = stream;
  cuda_attention_gqa_forward(out_d.get(), lse_d.get(), q_d.get(), k_d.get(), v_d.get(), a.B, a.T,
                             a.H, a.KV, a.hs, g, o);
  cuda_attention_gqa_backward(dq_d.get(), dk_d.get(), dv_d.get(), delta_d.get(), dout_d.get(),
                              q_d.get(), k_d.get(), v_d.get(), out_d.get(), lse_d.get(), a.B, a.T,
                              a.H, a.KV, a.hs, g, o);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::string shape =
      " (T=" + std::to_string(a.T) + " H=" + std::to_string(a.H) + " KV=" + std::to_string(a.KV) +
      " hs=" + std::to_string(a.hs) + " window=" + std::to_string(o.window) +
      " scale=" + std::to_string(o.scale) + " softcap=" + std::to_string(o.softcap) + ")";
  expect_close(tag<T>("cuda_attention_gqa_forward", "out") + shape, out_d.download(), out,
               attention_tol<T>());
  expect_close(tag<T>("cuda_attention_gqa_forward", "lse") + shape, lse_d.download(), lse,
               attention_tol<float>());
  expect_close(tag<T>("cuda_attention_gqa_backward", "dq") + shape, dq_d.download(), dq,
               attention_tol<T>());
  expect_close(tag<T>("cuda_attention_gqa_backward", "dk") + shape, dk_d.download(), dk,
               attention_tol<T>());
  expect_close(tag<T>("cuda_attention_gqa_backward", "dv") + shape, dv_d.download(), dv,
               attention_tol<T>());
}

TYPED_TEST(CudaLlamaKernel, GroupedQueryAttention) {
  for (const gqa_shape& a : kGqaShapes)
    expect_gqa_matches_cpu<TypeParam>(a, {}, 1.5, this->stream);
}

// Mistral's window and Gemma 2's scale and soft-cap, each and all at once,
// against the CPU's (runtime/attention_options.h). T = 100 (not a multiple
// of the 32-key tile) with groups of 2 (H=4, KV=2): windows of 40 (not a
// multiple of the tile: the last query tiles skip key tile 0 and mask part
// of tile 1), 7 (within a tile), 1 (each query its own key) and 200 (at
// least T: plain causal); the scale 1 makes scores of ~6 standard deviations
// (q and k uniform in [-1.5, 1.5], hs 64), past the caps 5 and 2; head size
// 96 with groups of 2 on T = 45 as well.
TYPED_TEST(CudaLlamaKernel, GroupedQueryAttentionWindowScaleSoftcap) {
  const gqa_shape base{2, 100, 4, 2, 64}, odd{1, 45, 6, 3, 96};
  const attention_options options[] = {{40, 0.0f, 0.0f},  {7, 0.0f, 0.0f},  {1, 0.0f, 0.0f},
                                       {200, 0.0f, 0.0f}, {0, 0.3f, 0.0f},  {0, 1.0f, 5.0f},
                                       {0, 0.0f, 0.5f},   {40, 1.0f, 2.0f}, {13, 0.2f, 1.0f}};
  for (const attention_options& o : options) {
    expect_gqa_matches_cpu<TypeParam>(base, o, 1.5, this->stream);
    expect_gqa_matches_cpu<TypeParam>(odd, o, 1.5, this->stream);
  }
}

// Options the CPU refuses the CUDA kernels refuse too, with
// std::invalid_argument before anything is enqueued: no device is needed (the
// pointers are never read).
TEST(CudaAttentionOptions, NegativeOrNonFiniteOptionsAreRefusedBeforeEnqueuing) {
  gpu_exec g;
  bf16* p = nullptr;
  float* f = nullptr;
  for (const attention_options& o :
       {attention_options{-1, 0.0f, 0.0f}, attention_options{0, -1.0f, 0.0f},
        attention_options{0, 0.0f, -50.0f}, attention_options{0, 0.0f, INFINITY},
        attention_options{0, NAN, 0.0f}}) {
    EXPECT_THROW(cuda_attention_gqa_forward(p, f, p, p, p, 1, 40, 4, 2, 64, g, o),
                 std::invalid_argument);
    EXPECT_THROW(cuda_attention_gqa_backward(p, p, p, f, p, p, p, p, p, f, 1, 40, 4, 2, 64, g, o),
                 std::invalid_argument);
  }
}

}  // namespace
