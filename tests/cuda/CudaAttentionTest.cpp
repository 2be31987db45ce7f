// CudaAttentionTest: runtime/cuda/attention.h, materialized and flash,
// against the CPU's attention kernels (runtime/cpu/kernels.h) on the same random
// stored inputs (fixed seeds), for fp32 and bf16 storage, printing the
// largest absolute and relative differences. Tolerances and fixtures:
// Gpt2Cases.h.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/cpu/kernels.h"
#include "runtime/cuda/attention.h"
#include "tests/cuda/Gpt2Cases.h"
#include "tests/runtime/Reference.h"

using ref::tag;

namespace gpt2_cases {
namespace {

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

}  // namespace
}  // namespace gpt2_cases
