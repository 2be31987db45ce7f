// CudnnAttentionTest (cuda): runtime/cuda/cudnn_attention.h. On the host:
// the choice between cuDNN and the hand-written kernels, the shape key. On a
// GPU (skipping, saying why, without one): cuDNN's forward and backward
// against the CPU's flash reference (runtime/cpu/kernels.h) and the hand-written
// flash kernels, bf16 and fp16, head sizes 64 and 128, T in {1, 7, 64, 1000,
// 4096}; its workspace against the planner's reservation; capture as a CUDA
// graph; refusals with the shape and both workspace sizes named.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "codegen/planner/Activations.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cuda/attention.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/cudnn_attention.h"
#include "tests/cuda/Device.h"
#include "tests/runtime/Reference.h"

using ref::load;
using ref::random_vec;
using ref::store;
using ref::tag;
using ref::vec;

namespace {

// ---------------------------------------------------------------- host: the choice

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string thrown(bool flash_plan, dtype_id p, int64_t hs, bool built, const char* forced,
                   int64_t T = 1024) {
  try {
    choose_attention(flash_plan, p, hs, T, 0.0f, built, forced);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(CudnnAttentionChoice, CudnnFor16BitFlashWithHeadSizesItTakes) {
  for (dtype_id p : {dtype_id::bf16, dtype_id::fp16})
    for (int64_t hs : {8, 16, 64, 128})
      for (const char* forced : {static_cast<const char*>(nullptr), "", "auto", "cudnn"})
        EXPECT_EQ(choose_attention(true, p, hs, 1024, 0.0f, true, forced).kernels,
                  attention_kernels::cudnn)
            << dtype_name(p) << " hs " << hs;
}

TEST(CudnnAttentionChoice, FlashKernelsOtherwiseSayingWhy) {
  struct fallback {
    dtype_id param;
    int64_t hs;
    int64_t T;
    bool built;
    const char* forced;
    const char* why;
  };
  for (const fallback& f :
       {fallback{dtype_id::fp32, 64, 1024, true, nullptr, "params are fp32"},
        fallback{dtype_id::bf16, 64, 1024, false, nullptr, "this build has no cuDNN"},
        fallback{dtype_id::bf16, 12, 1024, true, nullptr, "head size 12"},
        fallback{dtype_id::fp16, 60, 1024, true, "auto", "head size 60"},
        fallback{dtype_id::bf16, 64, 1, true, nullptr, "context 1"},
        fallback{dtype_id::bf16, 64, 1024, true, "flash", "FSDPGEN_ATTENTION=flash"}}) {
    const attention_choice c = choose_attention(true, f.param, f.hs, f.T, 0.0f, f.built, f.forced);
    EXPECT_EQ(c.kernels, attention_kernels::flash) << f.why;
    EXPECT_TRUE(has(c.why, f.why)) << c.why;
    EXPECT_TRUE(has(c.why, "flash kernels")) << c.why;
  }
  // The plan's probabilities: materialized, whatever else holds.
  EXPECT_EQ(choose_attention(false, dtype_id::bf16, 64, 1024, 0.0f, true, nullptr).kernels,
            attention_kernels::materialized);
  EXPECT_EQ(choose_attention(false, dtype_id::bf16, 64, 1024, 0.0f, true, "flash").kernels,
            attention_kernels::materialized);
}

// Gemma 2's attention soft-cap: cuDNN's SDPA takes one only as a score
// modifier, which excludes its causal mask, so a soft-capped model runs on
// the flash kernels, the line saying why; forcing cuDNN stops.
TEST(CudnnAttentionChoice, SoftCappedAttentionRunsOnTheFlashKernels) {
  for (const char* forced : {static_cast<const char*>(nullptr), "auto"}) {
    const attention_choice c =
        choose_attention(true, dtype_id::bf16, 64, 1024, 50.0f, true, forced);
    EXPECT_EQ(c.kernels, attention_kernels::flash) << c.why;
    EXPECT_TRUE(has(c.why,
                    "flash kernels (not cuDNN: attention_softcap 50 (cuDNN's SDPA takes "
                    "a soft-cap only as a score modifier"))
        << c.why;
  }
  try {
    choose_attention(true, dtype_id::fp16, 64, 1024, 30.0f, true, "cudnn");
    ADD_FAILURE() << "FSDPGEN_ATTENTION=cudnn took a soft-capped model";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), "FSDPGEN_ATTENTION=cudnn, but attention_softcap 30")) << e.what();
  }
}

TEST(CudnnAttentionChoice, ForcingCudnnWhereItCannotRunOrAnUnknownValueStops) {
  EXPECT_TRUE(has(thrown(true, dtype_id::fp32, 64, true, "cudnn"), "params are fp32"));
  EXPECT_TRUE(has(thrown(true, dtype_id::bf16, 64, false, "cudnn"), "no cuDNN"));
  EXPECT_TRUE(has(thrown(true, dtype_id::bf16, 12, true, "cudnn"), "head size 12"));
  EXPECT_TRUE(has(thrown(true, dtype_id::bf16, 64, true, "cudnn", 1), "context 1"));
  EXPECT_TRUE(has(thrown(false, dtype_id::bf16, 192, true, "cudnn"), "probabilities"));
  const std::string bad = thrown(true, dtype_id::bf16, 64, true, "fast");
  EXPECT_TRUE(has(bad, "FSDPGEN_ATTENTION=fast")) << bad;
  EXPECT_TRUE(has(bad, "flash, cudnn or auto")) << bad;
  EXPECT_EQ(thrown(true, dtype_id::bf16, 64, true, "flash"), "");
}

TEST(CudnnAttentionShape, KeysDifferInEveryFieldAndNameThem) {
  const cudnn_attention_shape a{4, 1024, 768, 12, dtype_id::bf16};
  EXPECT_FALSE(a < a);
  for (cudnn_attention_shape b : {cudnn_attention_shape{5, 1024, 768, 12, dtype_id::bf16},
                                  cudnn_attention_shape{4, 1000, 768, 12, dtype_id::bf16},
                                  cudnn_attention_shape{4, 1024, 512, 12, dtype_id::bf16},
                                  cudnn_attention_shape{4, 1024, 768, 6, dtype_id::bf16},
                                  cudnn_attention_shape{4, 1024, 768, 12, dtype_id::fp16}})
    EXPECT_TRUE(a < b || b < a) << b.name();
  EXPECT_EQ(a.name(), "B=4 T=1024 C=768 H=12 bf16");
}

// The window, the scale and the head size are part of the key (a model whose
// layers alternate has two shapes); a head size of C / H given or left 0 is
// one key.
TEST(CudnnAttentionShape, WindowScaleAndHeadSizeAreInTheKey) {
  const cudnn_attention_shape a{2, 1024, 512, 8, dtype_id::bf16, 2};
  cudnn_attention_shape same = a, window = a, scale = a, hs = a;
  same.hs = 64;
  window.window = 256;
  scale.scale = 0.0625f;
  hs.C = 1024;
  hs.hs = 128;
  EXPECT_FALSE(a < same || same < a);
  for (const cudnn_attention_shape& b : {window, scale, hs})
    EXPECT_TRUE(a < b || b < a) << b.name();
  EXPECT_EQ(same.name(), "B=2 T=1024 C=512 H=8 KV=2 bf16");
  EXPECT_EQ(window.name(), "B=2 T=1024 C=512 H=8 KV=2 bf16 window=256");
  EXPECT_EQ(scale.name(), "B=2 T=1024 C=512 H=8 KV=2 bf16 scale=0.0625");
}

// A soft-cap reaching the cuDNN path is refused before anything is enqueued
// (choose_attention never sends one there): no device is needed.
TEST(CudnnAttentionBuild, SoftcapIsRefusedBeforeEnqueuing) {
  if (!cudnn_attention_built()) GTEST_SKIP() << "this build has no cuDNN";
  gpu_exec g;
  bf16* p = nullptr;
  const attention_options o{0, 0.0f, 50.0f};
  EXPECT_THROW(cuda_cudnn_attention_gqa_forward(p, nullptr, p, p, p, 1, 64, 4, 2, 64, g, o),
               std::invalid_argument);
  EXPECT_THROW(
      cuda_cudnn_attention_gqa_backward(p, p, p, p, p, p, p, p, nullptr, 1, 64, 4, 2, 64, g, o),
      std::invalid_argument);
}

// Whether the library has cuDNN is what CMake found (BuildConfig.h says the
// same to the generated programs' build).
TEST(CudnnAttentionBuild, WithoutCudnnPreparingSaysSo) {
  if (cudnn_attention_built()) GTEST_SKIP() << "this build has cuDNN";
  EXPECT_THROW(gpu_attention_create(), std::logic_error);
}

// ---------------------------------------------------------------- GPU

// Tolerances: |cudnn - reference| <= atol + tol * |reference|, atol two
// storage ulps at the outputs' scale (2 eps * max(1, max |reference|): q, k,
// v and dout are of unit scale). Both sides read the same stored q, k, v and
// sum in fp32; cuDNN multiplies on tensor cores, rounding the probabilities P
// (and, in the backward, dS) to the storage type before the P.V, P^T.dO,
// dS.K and dS^T.Q products, where the reference keeps them fp32; outputs are
// rounded once. An output that cancels (a small dq from terms of unit size)
// errs by the terms' ulps, not its own: on an H100 (cuDNN 9, 2026-11-26) the
// largest difference over every shape here was exactly one ulp at unit
// scale (7.81e-3 bf16, 9.77e-4 fp16), in a few values of ~0.005 among
// millions, so a bound relative to each value or to the rms fails them.
//  - tol, relative: bf16 2e-2, the hand-written attention's bf16 tolerance
//    (CudaAttentionTest); fp16 5e-3.
//  - lse (fp32): 1e-4 of (|lse| + rms(lse)), the fp32 tolerance: exact
//    16-bit products summed in fp32 in another order, and expf against
//    cuDNN's exp2 with log2(e) folded in (a few ulps).
// A wrong mask, scale, stride or head offset errs by the values' own size.
template <class T>
constexpr double kOpTol = std::is_same_v<T, fp16> ? 5e-3 : 2e-2;
template <class T>
constexpr double kStorageEps = std::is_same_v<T, fp16> ? 0x1p-10 : 0x1p-7;
constexpr double kLseTol = 1e-4;

// got against want within kOpTol<T> and two ulps at the outputs' scale.
template <class T>
void expect_close_16bit(const std::string& what, const vec& got, const vec& want) {
  double largest = 1.0;
  for (double w : want)
    largest = std::max(largest, std::fabs(w));
  ref::expect_close(what, got, want, 2 * kStorageEps<T> * largest, kOpTol<T>);
}

using ref::expect_close_scaled;

// All bits set: NaN as fp32, bf16 and fp16, so that a value not written shows.
constexpr int kNanFill = 0xff;

struct shape {
  int64_t B, T, C, H;
  std::string name() const {
    return " B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
           " H=" + std::to_string(H);
  }
};
// Head sizes 64 (C=128, H=2) and 128 (C=128, H=1; C=256, H=2); T = 2 (the
// fewest keys cuDNN takes: it refuses one, and choose_attention then picks the
// flash kernels), 7 and 1000 (not a multiple of any tile), 64, 4096; B*H at
// most 4.
constexpr shape kShapes[] = {
    {1, 2, 128, 2}, {2, 7, 128, 2}, {1, 64, 128, 2}, {2, 1000, 128, 2}, {1, 4096, 128, 2},
    {1, 2, 128, 1}, {2, 7, 256, 2}, {1, 64, 128, 1}, {2, 1000, 128, 1}, {1, 4096, 256, 2}};
// The CPU reference is quadratic in T: above this, cuDNN is compared with the
// hand-written flash kernels only (themselves checked against the CPU in CudaAttentionTest).
constexpr int64_t kCpuMaxT = 1000;

template <class T>
cudnn_attention_shape key(const shape& s) {
  return {s.B, s.T, s.C, s.H, std::is_same_v<T, fp16> ? dtype_id::fp16 : dtype_id::bf16};
}

// A stream, a cuDNN context (g.attention) and, per shape, the workspace cuDNN asks for.
class CudnnAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = no_device_reason();
    if (!reason.empty()) GTEST_SKIP() << "no CUDA device: " << reason;
    if (!cudnn_attention_built()) GTEST_SKIP() << "this build has no cuDNN";
    CUDA_CHECK(cudaStreamCreate(&g.stream));
    g.attention = gpu_attention_create();
  }
  void TearDown() override {
    gpu_attention_destroy(g.attention);
    if (workspace_) cudaFree(workspace_);
    if (g.stream) cudaStreamDestroy(g.stream);
  }
  void sync() { CUDA_CHECK(cudaStreamSynchronize(g.stream)); }
  // Builds shape's graphs and gives g the workspace they ask for.
  void prepare(const cudnn_attention_shape& s) {
    gpu_attention_prepare(*g.attention, s, int64_t{1} << 40);
    const int64_t bytes = gpu_attention_workspace_bytes(*g.attention, s);
    if (bytes <= g.lt_workspace_bytes) return;
    if (workspace_) CUDA_CHECK(cudaFree(workspace_));
    CUDA_CHECK(cudaMalloc(&workspace_, static_cast<size_t>(bytes)));
    g.lt_workspace = workspace_;
    g.lt_workspace_bytes = bytes;
  }

  gpu_exec g;

 private:
  void* workspace_ = nullptr;
};

template <class T>
class CudnnAttentionTyped : public CudnnAttention {};
using HalfTypes = ::testing::Types<bf16, fp16>;
TYPED_TEST_SUITE(CudnnAttentionTyped, HalfTypes, ref::StorageTypeNames);

template <class T>
std::vector<T> random_stored(std::mt19937& rng, int64_t n, double scale) {
  return store<T>(random_vec(rng, n, scale));
}

// cuDNN's out and lse against the CPU flash reference (T <= kCpuMaxT) and
// the hand-written flash kernels (every T). Outputs start as NaN.
TYPED_TEST(CudnnAttentionTyped, ForwardMatchesTheReferenceAndTheFlashKernels) {
  using T = TypeParam;
  for (const shape& a : kShapes) {
    this->prepare(key<T>(a));
    const int64_t N = a.B * a.T, R = a.B * a.H * a.T;
    std::mt19937 rng(1500);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C, 1.5);
    device_vec<T> qkv_d(qkv), out_d(N * a.C, kNanFill), flash_out_d(N * a.C, kNanFill);
    device_vec<float> lse_d(R, kNanFill), flash_lse_d(R, kNanFill);
    cuda_cudnn_attention_forward(out_d.get(), lse_d.get(), qkv_d.get(), a.B, a.T, a.C, a.H,
                                 this->g);
    cuda_attention_forward_flash(flash_out_d.get(), flash_lse_d.get(), qkv_d.get(), a.B, a.T, a.C,
                                 a.H, this->g);
    this->sync();
    const vec out = load(out_d.download()), lse = load(lse_d.download());
    expect_close_16bit<T>(tag<T>("cudnn forward", "out vs flash kernels") + a.name(), out,
                          load(flash_out_d.download()));
    expect_close_scaled(tag<T>("cudnn forward", "lse vs flash kernels") + a.name(), lse,
                        load(flash_lse_d.download()), kLseTol);
    if (a.T > kCpuMaxT) continue;
    std::vector<T> cpu_out(N * a.C);
    std::vector<float> cpu_lse(R);
    attention_forward_flash(cpu_out.data(), cpu_lse.data(), qkv.data(), a.B, a.T, a.C, a.H);
    expect_close_16bit<T>(tag<T>("cudnn forward", "out vs cpu") + a.name(), out, load(cpu_out));
    expect_close_scaled(tag<T>("cudnn forward", "lse vs cpu") + a.name(), lse, load(cpu_lse),
                        kLseTol);
  }
}

// Both backwards read the same out and lse (the CPU flash forward's up to
// kCpuMaxT, else the hand-written kernels'): cuDNN's backward takes the lse
// the flash layout saves. dqkv against the CPU's attention_backward_flash
// and the hand-written backward.
TYPED_TEST(CudnnAttentionTyped, BackwardMatchesTheReferenceAndTheFlashKernels) {
  using T = TypeParam;
  for (const shape& a : kShapes) {
    this->prepare(key<T>(a));
    const int64_t N = a.B * a.T, R = a.B * a.H * a.T;
    std::mt19937 rng(1600);
    const auto qkv = random_stored<T>(rng, N * 3 * a.C, 1.5);
    const auto dout = random_stored<T>(rng, N * a.C, 1.0);
    const bool on_cpu = a.T <= kCpuMaxT;
    std::vector<T> out(N * a.C), dqkv(on_cpu ? N * 3 * a.C : 0);
    std::vector<float> lse(R), delta(R);
    device_vec<T> qkv_d(qkv), dout_d(dout);
    if (on_cpu) {
      attention_forward_flash(out.data(), lse.data(), qkv.data(), a.B, a.T, a.C, a.H);
      attention_backward_flash(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(),
                               lse.data(), a.B, a.T, a.C, a.H);
    } else {
      device_vec<T> o(N * a.C, kNanFill);
      device_vec<float> l(R, kNanFill);
      cuda_attention_forward_flash(o.get(), l.get(), qkv_d.get(), a.B, a.T, a.C, a.H, this->g);
      this->sync();
      out = o.download();
      lse = l.download();
    }
    device_vec<T> out_d(out), dqkv_d(N * 3 * a.C, kNanFill), flash_dqkv_d(N * 3 * a.C, kNanFill);
    device_vec<float> lse_d(lse), delta_d(R, kNanFill);
    cuda_cudnn_attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), lse_d.get(),
                                  a.B, a.T, a.C, a.H, this->g);
    cuda_attention_backward_flash(flash_dqkv_d.get(), delta_d.get(), dout_d.get(), qkv_d.get(),
                                  out_d.get(), lse_d.get(), a.B, a.T, a.C, a.H, this->g);
    this->sync();
    const vec got = load(dqkv_d.download());
    expect_close_16bit<T>(tag<T>("cudnn backward", "dqkv vs flash kernels") + a.name(), got,
                          load(flash_dqkv_d.download()));
    if (on_cpu)
      expect_close_16bit<T>(tag<T>("cudnn backward", "dqkv vs cpu") + a.name(), got, load(dqkv));
  }
}

// The planner's reservation (codegen/planner/Activations.h) holds what cuDNN asks
// for, for these shapes and GPT-2's (124M at B = 4 and 16, T = 1024; 1.5B's
// 25 heads of 64 at B = 2).
TYPED_TEST(CudnnAttentionTyped, PlannedWorkspaceHoldsWhatCudnnAsks) {
  using T = TypeParam;
  std::vector<shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.insert(shapes.end(), {{4, 1024, 768, 12}, {16, 1024, 768, 12}, {2, 1024, 1600, 25}});
  for (const shape& a : shapes) {
    this->prepare(key<T>(a));
    fsdpgen::ModelSpec m;
    m.context = a.T;
    m.width = a.C;
    m.heads = a.H;
    const fsdpgen::ActivationShape act{a.B * a.T, 2, true};
    const int64_t planned = fsdpgen::cudnn_attention_workspace_bytes(m, act);
    const int64_t asked = gpu_attention_workspace_bytes(*this->g.attention, key<T>(a));
    std::printf("  %-40s cuDNN asks %lld bytes, planned %lld\n", a.name().c_str(),
                static_cast<long long>(asked), static_cast<long long>(planned));
    EXPECT_LE(asked, planned) << a.name();
  }
}

// A step is captured as a CUDA graph: cuDNN's forward and backward capture
// (no allocation or synchronization inside) and the replay computes what
// the eager calls did (the forward bit for bit; the backward to the
// tolerance, its dQ summed with atomics in whatever order).
TYPED_TEST(CudnnAttentionTyped, CapturesAsACudaGraph) {
  using T = TypeParam;
  const shape a{2, 1000, 128, 2};
  this->prepare(key<T>(a));
  const int64_t N = a.B * a.T, R = a.B * a.H * a.T;
  std::mt19937 rng(1700);
  device_vec<T> qkv_d(random_stored<T>(rng, N * 3 * a.C, 1.5));
  device_vec<T> dout_d(random_stored<T>(rng, N * a.C, 1.0));
  device_vec<T> out_d(N * a.C, kNanFill), dqkv_d(N * 3 * a.C, kNanFill);
  device_vec<float> lse_d(R, kNanFill);
  auto step = [&] {
    cuda_cudnn_attention_forward(out_d.get(), lse_d.get(), qkv_d.get(), a.B, a.T, a.C, a.H,
                                 this->g);
    cuda_cudnn_attention_backward(dqkv_d.get(), dout_d.get(), qkv_d.get(), out_d.get(), lse_d.get(),
                                  a.B, a.T, a.C, a.H, this->g);
  };
  step();
  this->sync();
  const std::vector<T> out = out_d.download(), dqkv = dqkv_d.download();
  const std::vector<float> lse = lse_d.download();
  CUDA_CHECK(cudaMemset(out_d.get(), kNanFill, N * a.C * sizeof(T)));
  CUDA_CHECK(cudaMemset(dqkv_d.get(), kNanFill, N * 3 * a.C * sizeof(T)));
  CUDA_CHECK(cudaMemset(lse_d.get(), kNanFill, R * sizeof(float)));

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(this->g.stream, cudaStreamCaptureModeThreadLocal));
  step();
  CUDA_CHECK(cudaStreamEndCapture(this->g.stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, this->g.stream));
  this->sync();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  EXPECT_EQ(load(out_d.download()), load(out));
  EXPECT_EQ(lse_d.download(), lse);
  expect_close_scaled(tag<T>("cudnn backward", "dqkv replayed vs eager") + a.name(),
                      load(dqkv_d.download()), load(dqkv), kOpTol<T>);
}

// Refusals at set-up name the shape and cuDNN's reason, or both workspace
// sizes; a step for a shape never prepared names it too.
TEST_F(CudnnAttention, RefusalsNameTheShapeAndTheSizes) {
  const cudnn_attention_shape odd{1, 16, 24, 2, dtype_id::bf16};  // head size 12
  try {
    gpu_attention_prepare(*g.attention, odd, int64_t{1} << 40);
    ADD_FAILURE() << "cuDNN took head size 12";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), "B=1 T=16 C=24 H=2 bf16")) << e.what();
  }
  const cudnn_attention_shape s{2, 1000, 128, 2, dtype_id::bf16};
  try {
    gpu_attention_prepare(*g.attention, s, 1000);
    ADD_FAILURE() << "a 1000-byte workspace was enough";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), s.name())) << e.what();
    EXPECT_TRUE(has(e.what(), "holds 1000 bytes")) << e.what();
    EXPECT_TRUE(has(e.what(), "needs a workspace of")) << e.what();
  }
  bf16* p = nullptr;
  EXPECT_THROW(cuda_cudnn_attention_forward(p, nullptr, p, 2, 1000, 128, 2, g), std::logic_error);
}

// The planner's reservation for grouped-query attention at B sequences of T
// tokens, H query heads and KV key/value heads of hs (16-bit params).
int64_t planned_gqa_workspace(int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hs) {
  fsdpgen::ModelSpec m;
  m.family = fsdpgen::Family::Llama;
  m.context = T;
  m.width = H * hs;
  m.heads = H;
  m.kv_heads = KV;
  return fsdpgen::cudnn_attention_workspace_bytes(m, fsdpgen::ActivationShape{B * T, 2, true});
}

// cuDNN's grouped-query forward and backward (graphs of shape s, prepared)
// against the flash kernels' with the same options, on random inputs from
// `seed`: out, lse, dq, dk and dv.
template <class T>
void expect_gqa_cudnn_equals_flash(gpu_exec& g, const cudnn_attention_shape& s, int64_t hs,
                                   const attention_options& o, unsigned seed) {
  const int64_t N = s.B * s.T, C = s.H * hs, KVW = s.KV * hs, rows = s.B * s.H * s.T;
  std::mt19937 rng(seed);
  const auto q = store<T>(random_vec(rng, N * C, 1.5)), k = store<T>(random_vec(rng, N * KVW, 1.5));
  const auto v = store<T>(random_vec(rng, N * KVW)), dout = store<T>(random_vec(rng, N * C));
  device_vec<T> q_d(q), k_d(k), v_d(v), dout_d(dout);
  device_vec<T> out_c(N * C), dq_c(N * C), dk_c(N * KVW), dv_c(N * KVW);
  device_vec<T> out_f(N * C), dq_f(N * C), dk_f(N * KVW), dv_f(N * KVW);
  device_vec<float> lse_c(rows), lse_f(rows), delta(rows);
  cuda_cudnn_attention_gqa_forward(out_c.get(), lse_c.get(), q_d.get(), k_d.get(), v_d.get(), s.B,
                                   s.T, s.H, s.KV, hs, g, o);
  cuda_cudnn_attention_gqa_backward(dq_c.get(), dk_c.get(), dv_c.get(), dout_d.get(), q_d.get(),
                                    k_d.get(), v_d.get(), out_c.get(), lse_c.get(), s.B, s.T, s.H,
                                    s.KV, hs, g, o);
  cuda_attention_gqa_forward(out_f.get(), lse_f.get(), q_d.get(), k_d.get(), v_d.get(), s.B, s.T,
                             s.H, s.KV, hs, g, o);
  cuda_attention_gqa_backward(dq_f.get(), dk_f.get(), dv_f.get(), delta.get(), dout_d.get(),
                              q_d.get(), k_d.get(), v_d.get(), out_f.get(), lse_f.get(), s.B, s.T,
                              s.H, s.KV, hs, g, o);
  CUDA_CHECK(cudaStreamSynchronize(g.stream));
  const ref::tolerance tol{2e-2, 2e-2};  // 16-bit inputs and outputs, fp32 inside both
  ref::expect_close(s.name() + " out", load(out_c.download()), load(out_f.download()), tol);
  ref::expect_close(s.name() + " lse", load(lse_c.download()), load(lse_f.download()),
                    ref::tolerance{1e-4, 1e-4});
  ref::expect_close(s.name() + " dq", load(dq_c.download()), load(dq_f.download()), tol);
  ref::expect_close(s.name() + " dk", load(dk_c.download()), load(dk_f.download()), tol);
  ref::expect_close(s.name() + " dv", load(dv_c.download()), load(dv_f.download()), tol);
}

// llama's grouped-query attention through cuDNN (fewer key/value heads,
// q, k, v arrays of their own) against the flash kernels' grouped-query
// path, the workspace it asks for within the plan's allowance
// (cudnn_attention_workspace_bytes), for groups of 4 and 2 at head size 64
// and 128 (Llama 3's), T past a tile and not a multiple of it.
TYPED_TEST(CudnnAttentionTyped, GroupedQueryEqualsTheFlashKernels) {
  using T = TypeParam;
  struct gqa {
    int64_t B, T, H, KV, hs;
  };
  for (const gqa& a : {gqa{2, 300, 8, 2, 64}, gqa{1, 129, 4, 2, 128}}) {
    const cudnn_attention_shape s{
        a.B, a.T, a.H * a.hs, a.H, std::is_same_v<T, fp16> ? dtype_id::fp16 : dtype_id::bf16, a.KV};
    this->prepare(s);
    EXPECT_LE(gpu_attention_workspace_bytes(*this->g.attention, s),
              planned_gqa_workspace(a.B, a.T, a.H, a.KV, a.hs))
        << s.name();
    expect_gqa_cudnn_equals_flash<T>(this->g, s, a.hs, {}, 21);
  }
}

// cuDNN's sliding window (its diagonal band's left bound) and attn_scale
// against the flash kernels with the same attention_options: windows of 100
// and 37 (not multiples of any tile, shorter than T), 1 (each query its own
// key) and 500 (at least T: plain causal), scales of 0.2 and Gemma 2 9B's
// 256^-0.5 at head size 128, T past a tile and not a multiple of it.
TYPED_TEST(CudnnAttentionTyped, WindowAndScaleEqualTheFlashKernels) {
  using T = TypeParam;
  struct gqa {
    int64_t B, T, H, KV, hs;
    attention_options o;
  };
  for (const gqa& a :
       {gqa{2, 300, 8, 2, 64, {100, 0.0f, 0.0f}}, gqa{2, 300, 8, 2, 64, {1, 0.0f, 0.0f}},
        gqa{1, 129, 4, 2, 128, {37, 0.2f, 0.0f}}, gqa{1, 129, 4, 2, 128, {0, 0.0625f, 0.0f}},
        gqa{1, 129, 4, 4, 64, {500, 0.0f, 0.0f}}}) {
    const cudnn_attention_shape s{
        a.B,  a.T,  a.H * a.hs, a.H,      std::is_same_v<T, fp16> ? dtype_id::fp16 : dtype_id::bf16,
        a.KV, a.hs, a.o.window, a.o.scale};
    this->prepare(s);
    expect_gqa_cudnn_equals_flash<T>(this->g, s, a.hs, a.o, 22);
  }
}

// The planner's reservation holds what cuDNN asks for at the shapes llama
// trains: llama-1b's micro-batch (B=4 T=2048 H=32 KV=8 hs=64), which asked
// for more than the first allowance on an H100 (2026-11-26), and Llama 3 8B's
// (B=1 T=8192 H=32 KV=8 hs=128). Graphs only: nothing runs.
TYPED_TEST(CudnnAttentionTyped, PlannedWorkspaceHoldsWhatCudnnAsksForGroupedQueries) {
  using T = TypeParam;
  struct gqa {
    int64_t B, T, H, KV, hs;
  };
  for (const gqa& a : {gqa{4, 2048, 32, 8, 64}, gqa{1, 8192, 32, 8, 128}}) {
    const cudnn_attention_shape s{
        a.B, a.T, a.H * a.hs, a.H, std::is_same_v<T, fp16> ? dtype_id::fp16 : dtype_id::bf16, a.KV};
    gpu_attention_prepare(*this->g.attention, s, int64_t{1} << 40);
    const int64_t asked = gpu_attention_workspace_bytes(*this->g.attention, s);
    const int64_t planned = planned_gqa_workspace(a.B, a.T, a.H, a.KV, a.hs);
    std::printf("  %-40s cuDNN asks %lld bytes, planned %lld\n", s.name().c_str(),
                static_cast<long long>(asked), static_cast<long long>(planned));
    EXPECT_LE(asked, planned) << s.name();
  }
}

}  // namespace
