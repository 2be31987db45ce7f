// Gpt2Test (cuda): runtime/cuda/gpt2.h's layers (block, with either
// attention layout; final norm and head; embedding), forward and backward,
// against their CPU counterparts (runtime/cpu/gpt2.h) on the same random stored
// inputs (fixed seeds), for fp32 and bf16 storage and gradients, printing
// the largest absolute and relative differences. Tolerances and fixtures:
// Gpt2Cases.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/cpu/gpt2.h"
#include "runtime/cuda/gpt2.h"
#include "tests/cuda/Gpt2Cases.h"
#include "tests/runtime/BlockLayout.h"
#include "tests/runtime/Reference.h"

using ref::block_flat;
using ref::block_flat_elems;
using ref::block_pointers;
using ref::block_tensor_elems;
using ref::tag;
using ref::to_gpt2;

namespace gpt2_cases {
namespace {

// Bytes after a saved slot or scratch that must keep their NaN fill.
constexpr int64_t kGuardBytes = 256;
bool guard_intact(const std::vector<std::byte>& buf, int64_t bytes) {
  for (int64_t i = bytes; i < static_cast<int64_t>(buf.size()); i++)
    if (buf[i] != std::byte{kNanFill}) return false;
  return true;
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
}  // namespace gpt2_cases
