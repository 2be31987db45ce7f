// Gpt2Test: runtime/gpt2.h's layouts (sizes and pointers carved from
// runtime/model/gpt2.h, against hand counts) and its block (with materialized and
// flash attention), head and a tiny whole model (embed, 2 blocks, tied head)
// against the double-precision reference of Reference.h, gradients against
// finite differences of the reference loss.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "BlockLayout.h"
#include "Reference.h"
#include "runtime/cpu/gpt2.h"

using ref::block_flat;
using ref::block_flat_elems;
using ref::block_pointers;
using ref::block_tensor_elems;
using ref::block_unflat;
using ref::load;
using ref::quantize;
using ref::random_vec;
using ref::store;
using ref::to_gpt2;
using ref::vec;

namespace {

// Tolerances (|got - want| <= atol + rtol * |want|) for fp32 runs of whole
// layers: each output passes through ~10 kernels with fp32 sums of up to
// F = 64 terms; measured errors are at most 1.4e-6, so 1e-4 leaves a wide
// margin while still catching any wrong term (those err by ~1e-1). Gradients
// are compared with central differences in double (exact to ~1e-9).
constexpr double kLayerAtol = 1e-4, kLayerRtol = 1e-4;

const ref::dims kDims{2, 8, 16, 4, 64, 50};  // B, T, C, H, F, V

template <class T>
ref::block_params quantize_block(const ref::block_params& p, const ref::dims& d) {
  auto flat = block_flat<T>(p, d);
  return block_unflat(flat, d);
}

// A byte buffer of exactly `bytes` followed by a guard that must stay intact:
// the kernels write nothing outside the planned sizes.
class guarded_buffer {
 public:
  explicit guarded_buffer(int64_t bytes) : bytes_(bytes), buf_(bytes + kGuard, kPattern) {}
  std::byte* data() { return buf_.data(); }
  bool guard_intact() const {
    for (int64_t i = bytes_; i < bytes_ + kGuard; i++)
      if (buf_[i] != kPattern) return false;
    return true;
  }

 private:
  static constexpr int64_t kGuard = 256;
  static constexpr std::byte kPattern{0xa5};
  int64_t bytes_;
  std::vector<std::byte> buf_;
};

gemm_workspace workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  return gemm_workspace{buf.data(), static_cast<int64_t>(buf.size())};
}

// Finite-difference check of `sample` elements (all when the tensor is small)
// of x against the analytic gradient `got` (same length as x).
void check_sampled_grad(const std::string& what, const vec& got, const vec& x,
                        const std::function<double(const vec&)>& loss, std::mt19937& rng,
                        double atol = kLayerAtol, double rtol = kLayerRtol) {
  const int64_t n = static_cast<int64_t>(x.size()), sample = 16;
  std::vector<int64_t> idx;
  if (n <= 64) {
    for (int64_t i = 0; i < n; i++)
      idx.push_back(i);
  } else {
    std::uniform_int_distribution<int64_t> u(0, n - 1);
    for (int64_t i = 0; i < sample; i++)
      idx.push_back(u(rng));
  }
  vec want, have, xp = x;
  const double h = 1e-5;
  for (int64_t i : idx) {
    xp[i] = x[i] + h;
    const double up = loss(xp);
    xp[i] = x[i] - h;
    const double down = loss(xp);
    xp[i] = x[i];
    want.push_back((up - down) / (2 * h));
    have.push_back(got[i]);
  }
  ref::expect_close(what, have, want, atol, rtol);
}

// One block run on T storage with G gradients: forward from x, backward from dout.
struct block_run {
  vec out, dinput;
  ref::block_params grads;
  bool guards_intact;
};
// The tensors of pieces [first, end) of a block (the others null), as a
// sub-block unit's op passes them: a piece may read no other piece's tensor.
template <class Out>
Out only_pieces(Out all, int first, int end) {
  Out p = all;
  auto keep = [&](auto& field, int piece) {
    if (piece < first || piece >= end) field = nullptr;
  };
  keep(p.ln1_w, kGpt2Ln1), keep(p.ln1_b, kGpt2Ln1), keep(p.qkv_w, kGpt2Qkv),
      keep(p.qkv_b, kGpt2Qkv), keep(p.proj_w, kGpt2Proj), keep(p.proj_b, kGpt2Proj);
  keep(p.ln2_w, kGpt2Ln2), keep(p.ln2_b, kGpt2Ln2), keep(p.fc_w, kGpt2Fc), keep(p.fc_b, kGpt2Fc),
      keep(p.fc2_w, kGpt2Fc2), keep(p.fc2_b, kGpt2Fc2);
  return p;
}

// `pieces`: run the block as sub-block units do, a call per range (forward
// in order, backward in reverse), each given only its pieces' tensors.
template <class T, class G>
block_run run_block(const ref::block_params& p, const vec& x, const vec& dout, const ref::dims& d,
                    bool flash = false, const std::vector<block_pieces>& pieces = {{}}) {
  gpt2_dims gd = to_gpt2(d);
  gd.flash = flash;
  auto params = block_flat<T>(p, d);
  std::vector<G> grads(block_flat_elems(d), from_float<G>(0.0f));
  guarded_buffer saved(gpt2_block_saved_bytes(gd, sizeof(T)));
  guarded_buffer scratch(gpt2_backward_scratch_bytes(gd, sizeof(T)));
  const auto s = gpt2_block_saved_at<T>(saved.data(), gd);
  const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), gd);
  const auto xs = store<T>(x), douts = store<T>(dout);
  std::copy(xs.begin(), xs.end(), s.input);
  std::vector<T> out(d.N() * d.C);
  const auto bp = gpt2_block_params_at<T>(params.data(), gd);
  const auto bg = gpt2_block_grads_at<G>(grads.data(), gd);
  for (const block_pieces& r : pieces)
    gpt2_block_forward(out.data(), only_pieces(bp, r.first, r.end), s, gd, workspace(), r);
  std::copy(douts.begin(), douts.end(), sc.dres);
  for (auto r = pieces.rbegin(); r != pieces.rend(); ++r)
    gpt2_block_backward(only_pieces(bg, r->first, r->end), only_pieces(bp, r->first, r->end), s, sc,
                        gd, workspace(), *r);
  return {load(out), load(sc.dres, d.N() * d.C), block_unflat(grads, d),
          saved.guard_intact() && scratch.guard_intact()};
}

// Dims whose 3C exceeds 2F and whose N * C is odd: with bf16 the scratch's
// T arrays end off a 4-byte boundary, which delta must round up to.
const ref::dims kOddDims{3, 5, 21, 3, 20, 7};

TEST(Gpt2Layout, SizesMatchFormulas) {
  for (const ref::dims& d : {kDims, ref::dims{3, 5, 20, 5, 80, 7}, kOddDims}) {
    gpt2_dims gd = to_gpt2(d);
    const int64_t N = d.N(), C = d.C, F = d.F, H = d.H, T = d.T;
    for (int64_t a : {2, 4}) {
      gd.flash = false;
      EXPECT_EQ(gpt2_block_saved_bytes(gd, a), N * (16 + a * (8 * C + 2 * F + H * T)));
      EXPECT_EQ(gpt2_final_norm_saved_bytes(gd, a), N * (8 + a * 2 * C));
      EXPECT_EQ(gpt2_backward_scratch_bytes(gd, a),
                N * a * (2 * C + std::max(3 * C + H * T, 2 * F)));
      gd.flash = true;
      EXPECT_EQ(gpt2_block_saved_bytes(gd, a), N * (16 + a * (8 * C + 2 * F) + 4 * H));
      EXPECT_EQ(gpt2_final_norm_saved_bytes(gd, a), N * (8 + a * 2 * C));
      EXPECT_EQ(gpt2_backward_scratch_bytes(gd, a),
                (N * a * (2 * C + std::max(3 * C, 2 * F)) + 3) / 4 * 4 + 4 * N * H);
    }
  }
}

TEST(Gpt2Layout, SavedArraysArePackedInOrder) {
  const ref::dims d{3, 5, 20, 5, 80, 7};
  const gpt2_dims gd = to_gpt2(d);
  const int64_t N = d.N(), C = d.C, F = d.F;
  std::vector<std::byte> slot(gpt2_block_saved_bytes(gd, 2));
  std::byte* base = slot.data();
  const auto s = gpt2_block_saved_at<bf16>(base, gd);
  auto at = [&](const void* p) { return static_cast<const std::byte*>(p) - base; };
  const std::vector<int64_t> offsets = {
      at(s.ln1_mean), at(s.ln1_rstd), at(s.ln2_mean), at(s.ln2_rstd), at(s.input),
      at(s.ln1),      at(s.qkv),      at(s.attn),     at(s.res2),     at(s.ln2),
      at(s.fc),       at(s.gelu),     at(s.probs)};
  const std::vector<int64_t> sizes = {
      4 * N,     4 * N,     4 * N,     4 * N,     2 * N * C, 2 * N * C,        2 * N * 3 * C,
      2 * N * C, 2 * N * C, 2 * N * C, 2 * N * F, 2 * N * F, 2 * N * d.H * d.T};
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); i++) {
    EXPECT_EQ(offsets[i], off) << "array " << i;
    off += sizes[i];
  }
  EXPECT_EQ(off, gpt2_block_saved_bytes(gd, 2));

  const auto f = gpt2_final_norm_saved_at<float>(base, gd);
  EXPECT_EQ(at(f.mean), 0);
  EXPECT_EQ(at(f.rstd), 4 * N);
  EXPECT_EQ(at(f.input), 8 * N);
  EXPECT_EQ(at(f.output), 8 * N + 4 * N * C);
  EXPECT_EQ(8 * N + 8 * N * C, gpt2_final_norm_saved_bytes(gd, 4));

  const auto sc = gpt2_backward_scratch_at<float>(base, gd);
  EXPECT_EQ(at(sc.dres), 0);
  EXPECT_EQ(at(sc.dtmp), 4 * N * C);
  EXPECT_EQ(at(sc.big), 8 * N * C);
  EXPECT_EQ(sc.delta, nullptr);
}

// With flash, the slot ends with lse (fp32) where the probabilities were,
// and the scratch's fp32 delta follows big from the next 4-byte boundary.
TEST(Gpt2Layout, FlashArraysFollowTheStoredOnes) {
  for (const ref::dims& d : {ref::dims{3, 5, 20, 5, 80, 7}, kOddDims}) {
    gpt2_dims gd = to_gpt2(d);
    gd.flash = true;
    const int64_t N = d.N(), C = d.C, F = d.F, H = d.H;
    std::vector<std::byte> buf(gpt2_backward_scratch_bytes(gd, 2) + gpt2_block_saved_bytes(gd, 2));
    std::byte* base = buf.data();
    auto at = [&](const void* p) { return static_cast<const std::byte*>(p) - base; };
    const auto s = gpt2_block_saved_at<bf16>(base, gd);
    EXPECT_EQ(s.probs, nullptr);
    EXPECT_EQ(at(s.gelu), 16 * N + 2 * N * (8 * C + F));
    EXPECT_EQ(at(s.lse), 16 * N + 2 * N * (8 * C + 2 * F));
    EXPECT_EQ(at(s.lse) % 4, 0);
    EXPECT_EQ(at(s.lse) + 4 * N * H, gpt2_block_saved_bytes(gd, 2));
    const auto sc = gpt2_backward_scratch_at<bf16>(base, gd);
    const int64_t big = std::max(3 * C, 2 * F);
    EXPECT_EQ(at(sc.big), 4 * N * C);
    EXPECT_EQ(at(sc.delta), (2 * N * (2 * C + big) + 3) / 4 * 4);
    EXPECT_EQ(at(sc.delta) + 4 * N * H, gpt2_backward_scratch_bytes(gd, 2));
  }
}

TEST(Gpt2Layout, BlockTensorsOn16ElementBoundaries) {
  const ref::dims d{3, 5, 20, 5, 80, 7};
  std::vector<float> flat(block_flat_elems(d));
  const auto p = gpt2_block_params_at<float>(flat.data(), to_gpt2(d));
  const std::vector<const float*> got = {p.ln1_w, p.ln1_b, p.qkv_w, p.qkv_b, p.proj_w, p.proj_b,
                                         p.ln2_w, p.ln2_b, p.fc_w,  p.fc_b,  p.fc2_w,  p.fc2_b};
  const auto g = block_pointers(gpt2_block_grads_at<float>(flat.data(), to_gpt2(d)));
  // C = 20: ln_1.weight at 0, ln_1.bias at 32, c_attn.weight at 64, c_attn.bias at 1264, ...
  const std::vector<int64_t> want = {0,    32,   64,   1264, 1328, 1728,
                                     1760, 1792, 1824, 3424, 3504, 5104};
  for (size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(got[i] - flat.data(), want[i]) << ref::block_tensors()[i].name;
    EXPECT_EQ(g[i] - flat.data(), want[i]) << ref::block_tensors()[i].name;
  }
}

// Both attention layouts (materialized probabilities; flash: log-sum-exp).
void check_fp32_block_against_reference(bool flash) {
  const ref::dims d = kDims;
  std::mt19937 rng(31);
  const ref::block_params p = ref::random_block(rng, d);
  const vec x = random_vec(rng, d.N() * d.C), R = random_vec(rng, d.N() * d.C);
  const auto run = run_block<float, float>(p, x, R, d, flash);
  EXPECT_TRUE(run.guards_intact) << "wrote outside the saved slot or the scratch";
  const std::string layout = flash ? " (flash)" : "";
  ref::expect_close("gpt2_block_forward<fp32> out" + layout, run.out, ref::block(x, p, d),
                    kLayerAtol, kLayerRtol);
  auto loss = [&](const vec& xx, const ref::block_params& pp) {
    return ref::dot(ref::block(xx, pp, d), R);
  };
  check_sampled_grad(
      "gpt2_block_backward<fp32,fp32> d(input)" + layout, run.dinput, x,
      [&](const vec& v) { return loss(v, p); }, rng);
  for (const auto& [name, member] : ref::block_tensors()) {
    check_sampled_grad(
        std::string("gpt2_block_backward<fp32,fp32> d ") + name + layout, run.grads.*member,
        p.*member,
        [&, m = member](const vec& v) {
          ref::block_params pp = p;
          pp.*m = v;
          return loss(x, pp);
        },
        rng);
  }
}

TEST(Gpt2Block, Fp32ForwardAndBackwardMatchReference) {
  check_fp32_block_against_reference(false);
}

TEST(Gpt2Block, Fp32FlashForwardAndBackwardMatchReference) {
  check_fp32_block_against_reference(true);
}

// The same block with flash attention and with materialized attention, on
// the same stored data. fp32: summation order only, kLayerAtol/kLayerRtol.
// bf16: materialized attention rounds its scores, probabilities and their
// gradients to bf16 and flash does not; those roundings (2^-9 relative)
// reach every output through a dozen kernels: 2e-2 of each tensor's max
// (the bf16-vs-fp32 comparison above allows 5e-2).
template <class T>
void check_flash_matches_materialized(double tol_of_max) {
  const ref::dims d = kDims;
  std::mt19937 rng(37);
  const ref::block_params p = quantize_block<T>(ref::random_block(rng, d), d);
  const vec x = quantize<T>(random_vec(rng, d.N() * d.C));
  const vec R = quantize<T>(random_vec(rng, d.N() * d.C));
  const auto mat = run_block<T, T>(p, x, R, d, false);
  const auto flash = run_block<T, T>(p, x, R, d, true);
  EXPECT_TRUE(flash.guards_intact) << "wrote outside the saved slot or the scratch";
  const std::string tag = std::string("<") + ref::type_name<T>() + "> flash vs materialized: ";
  auto close = [&](const std::string& what, const vec& got, const vec& want) {
    double mx = 0.0;
    for (double v : want)
      mx = std::max(mx, std::abs(v));
    if (sizeof(T) == 4)
      ref::expect_close(what, got, want, kLayerAtol, kLayerRtol);
    else
      ref::expect_close(what, got, want, tol_of_max * mx, 0.0);
  };
  close("gpt2_block_forward" + tag + "out", flash.out, mat.out);
  close("gpt2_block_backward" + tag + "d(input)", flash.dinput, mat.dinput);
  for (const auto& [name, member] : ref::block_tensors())
    close("gpt2_block_backward" + tag + "d " + name, flash.grads.*member, mat.grads.*member);
}

TEST(Gpt2Block, FlashMatchesMaterialized) {
  check_flash_matches_materialized<float>(0.0);
  check_flash_matches_materialized<bf16>(2e-2);
}

// bf16 storage (and bf16 gradients) against the fp32 run on the same
// bf16-representable data: errors relative to each tensor's largest value,
// ~2^-8 per rounding through a dozen kernels; 5e-2 of the tensor's max.
TEST(Gpt2Block, Bf16CloseToFp32) {
  const ref::dims d = kDims;
  std::mt19937 rng(32);
  const ref::block_params p = quantize_block<bf16>(ref::random_block(rng, d), d);
  const vec x = quantize<bf16>(random_vec(rng, d.N() * d.C));
  const vec R = quantize<bf16>(random_vec(rng, d.N() * d.C));
  const auto f = run_block<float, float>(p, x, R, d);
  const auto b = run_block<bf16, bf16>(p, x, R, d);
  EXPECT_TRUE(b.guards_intact);
  auto close = [](const std::string& what, const vec& got, const vec& want) {
    double mx = 0.0;
    for (double v : want)
      mx = std::max(mx, std::abs(v));
    ref::expect_close(what, got, want, 5e-2 * mx, 0.0);
  };
  close("gpt2_block_forward<bf16> vs fp32: out", b.out, f.out);
  close("gpt2_block_backward<bf16,bf16> vs fp32: d(input)", b.dinput, f.dinput);
  for (const auto& [name, member] : ref::block_tensors())
    close(std::string("gpt2_block_backward<bf16,bf16> vs fp32: d ") + name, b.grads.*member,
          f.grads.*member);
}

// A recompute, gpt2_block_forward with out == nullptr, fills the saved slot
// with exactly the full forward's bytes and writes nothing outside it.
template <class T>
void check_forward_without_output(bool flash) {
  const ref::dims d = kDims;
  gpt2_dims gd = to_gpt2(d);
  gd.flash = flash;
  const int64_t bytes = gpt2_block_saved_bytes(gd, sizeof(T));
  std::mt19937 rng(36);
  auto params = block_flat<T>(ref::random_block(rng, d), d);
  const auto bp = gpt2_block_params_at<T>(params.data(), gd);
  const auto x = store<T>(random_vec(rng, d.N() * d.C));
  guarded_buffer full(bytes), recompute(bytes);
  const auto s_full = gpt2_block_saved_at<T>(full.data(), gd);
  const auto s_recompute = gpt2_block_saved_at<T>(recompute.data(), gd);
  std::copy(x.begin(), x.end(), s_full.input);
  std::copy(x.begin(), x.end(), s_recompute.input);
  std::vector<T> out(d.N() * d.C);
  gpt2_block_forward(out.data(), bp, s_full, gd, workspace());
  gpt2_block_forward(static_cast<T*>(nullptr), bp, s_recompute, gd, workspace());
  const std::string what = std::string(ref::type_name<T>()) + (flash ? " (flash)" : "");
  EXPECT_TRUE(recompute.guard_intact()) << what << ": wrote outside the saved slot";
  EXPECT_EQ(std::memcmp(full.data(), recompute.data(), bytes), 0)
      << what << ": saved activations differ from the full forward's";
}

// A block run piece by piece (each linear its own range, norms with the
// linear after them; and every piece alone) equals the whole block bit for
// bit: the same kernels on the same data in the same order.
TEST(Gpt2Block, PieceByPieceEqualsTheWholeBlock) {
  const ref::dims d = kDims;
  std::mt19937 rng(41);
  const ref::block_params p = ref::random_block(rng, d);
  const vec x = random_vec(rng, d.N() * d.C), R = random_vec(rng, d.N() * d.C);
  const std::vector<block_pieces> each_linear = {{0, 2}, {2, 3}, {3, 5}, {5, 6}};
  std::vector<block_pieces> each_piece;
  for (int i = 0; i < kGpt2Pieces; ++i)
    each_piece.push_back({i, i + 1});
  for (bool flash : {false, true})
    for (const auto& split : {each_linear, each_piece}) {
      const auto whole = run_block<bf16, float>(p, x, R, d, flash);
      const auto parts = run_block<bf16, float>(p, x, R, d, flash, split);
      EXPECT_TRUE(parts.guards_intact);
      EXPECT_EQ(parts.out, whole.out) << "flash " << flash << ", " << split.size() << " ranges";
      EXPECT_EQ(parts.dinput, whole.dinput) << "flash " << flash;
      for (const auto& [name, member] : ref::block_tensors())
        EXPECT_EQ(parts.grads.*member, whole.grads.*member) << name << ", flash " << flash;
    }
}

TEST(Gpt2Block, ForwardWithoutOutputFillsSavedOnly) {
  for (bool flash : {false, true}) {
    check_forward_without_output<float>(flash);
    check_forward_without_output<bf16>(flash);
  }
}

// Final norm, head and loss: losses, and the gradients of dloss_scale * sum(losses).
template <class T>
class Gpt2Head : public ::testing::Test {};
using StorageTypes = ::testing::Types<float, bf16>;
TYPED_TEST_SUITE(Gpt2Head, StorageTypes, ref::StorageTypeNames);

TYPED_TEST(Gpt2Head, LossAndGradientsMatchReference) {
  using T = TypeParam;
  // bf16: logits and their gradient are stored in bf16 (2^-9 relative), the
  // loss is an fp32 sum over V; 2e-2 as for the kernels.
  const double tol = sizeof(T) == 4 ? kLayerAtol : 2e-2;
  const ref::dims d = kDims;
  const gpt2_dims gd = to_gpt2(d);
  const int64_t N = d.N(), C = d.C, V = d.V;
  const float dloss_scale = 1.0f / static_cast<float>(N);
  std::mt19937 rng(33);
  const vec x = quantize<T>(random_vec(rng, N * C)), w = quantize<T>(random_vec(rng, V * C));
  const vec lnf_w = quantize<T>(random_vec(rng, C, 0.2, 1.0)),
            lnf_b = quantize<T>(random_vec(rng, C, 0.1));
  const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));
  const auto ws = store<T>(w), lw = store<T>(lnf_w), lb = store<T>(lnf_b), xs = store<T>(x);
  guarded_buffer saved(gpt2_final_norm_saved_bytes(gd, sizeof(T)));
  guarded_buffer scratch(gpt2_backward_scratch_bytes(gd, sizeof(T)));
  const auto s = gpt2_final_norm_saved_at<T>(saved.data(), gd);
  const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), gd);
  std::copy(xs.begin(), xs.end(), s.input);
  std::vector<T> logits(N * V);
  std::vector<float> losses(N);
  gpt2_head_forward(logits.data(), losses.data(), targets.data(), lw.data(), lb.data(), ws.data(),
                    s, gd, dloss_scale, workspace());
  std::vector<T> dlnf_w(C, from_float<T>(0.0f)), dlnf_b(C, from_float<T>(0.0f)),
      dw(V * C, from_float<T>(0.0f));
  gpt2_head_backward(dlnf_w.data(), dlnf_b.data(), dw.data(), lw.data(), ws.data(), logits.data(),
                     s, sc, gd, workspace());
  EXPECT_TRUE(saved.guard_intact() && scratch.guard_intact());
  const std::string tag = std::string("gpt2_head<") + ref::type_name<T>() + "> ";
  const vec y = ref::layernorm(x, lnf_w, lnf_b, N, C);
  ref::expect_close(tag + "losses", load(losses),
                    ref::cross_entropy(ref::lm_head(y, w, N, C, V), targets, N, V), tol, tol);
  auto loss = [&](const vec& xx, const vec& ww, const vec& bb, const vec& hw) {
    return dloss_scale * ref::head_loss(xx, ww, bb, hw, targets, d);
  };
  ref::expect_close(tag + "d(input)", load(sc.dres, N * C),
                    ref::fd_grad(x, [&](const vec& v) { return loss(v, lnf_w, lnf_b, w); }), tol,
                    tol);
  ref::expect_close(tag + "d lnf.weight", load(dlnf_w),
                    ref::fd_grad(lnf_w, [&](const vec& v) { return loss(x, v, lnf_b, w); }), tol,
                    tol);
  ref::expect_close(tag + "d lnf.bias", load(dlnf_b),
                    ref::fd_grad(lnf_b, [&](const vec& v) { return loss(x, lnf_w, v, w); }), tol,
                    tol);
  ref::expect_close(tag + "d head.weight", load(dw),
                    ref::fd_grad(w, [&](const vec& v) { return loss(x, lnf_w, lnf_b, v); }), tol,
                    tol);
}

// The head over a padded vocabulary (V = 50 stored as Vp = 128 rows, zero
// after row V) against the same head unpadded, fp32: losses and every
// gradient within relative 1e-6 (the runs differ only in the GEMMs' extra
// zero terms, which can move OpenBLAS's panel boundaries: a few fp32 ulps;
// a padded column in the softmax errs by ~1e-1), the padded rows' gradient
// and the padded logits columns exactly zero, and nothing outside the planned
// buffers written.
TEST(Gpt2Head, PaddedVocabEqualsUnpadded) {
  constexpr double kRtol = 1e-6, kAtol = 1e-7;
  const ref::dims d = kDims;
  gpt2_dims plain = to_gpt2(d), padded = plain;
  padded.V_padded = 128;
  const int64_t N = d.N(), C = d.C, V = d.V, Vp = padded.Vp();
  ASSERT_EQ(plain.Vp(), V);
  const float dloss_scale = 1.0f / static_cast<float>(N);
  std::mt19937 rng(35);
  const vec x = random_vec(rng, N * C), w = random_vec(rng, V * C);
  const vec lnf_w = random_vec(rng, C, 0.2, 1.0), lnf_b = random_vec(rng, C, 0.1);
  const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));
  struct run {
    std::vector<float> losses, logits, dres, dlnf_w, dlnf_b, dw;
  };
  auto head = [&](const gpt2_dims& gd) {
    const int64_t rows = gd.Vp();
    std::vector<float> ws(static_cast<size_t>(rows * C), 0.0f);
    std::copy(w.begin(), w.end(), ws.begin());
    const std::vector<float> xs(x.begin(), x.end()), lw(lnf_w.begin(), lnf_w.end()),
        lb(lnf_b.begin(), lnf_b.end());
    guarded_buffer saved(gpt2_final_norm_saved_bytes(gd, 4));
    guarded_buffer scratch(gpt2_backward_scratch_bytes(gd, 4));
    guarded_buffer logits(N * rows * 4);
    const auto s = gpt2_final_norm_saved_at<float>(saved.data(), gd);
    const auto sc = gpt2_backward_scratch_at<float>(scratch.data(), gd);
    std::copy(xs.begin(), xs.end(), s.input);
    float* lg = reinterpret_cast<float*>(logits.data());
    run r{std::vector<float>(N),
          {},
          {},
          std::vector<float>(C),
          std::vector<float>(C),
          std::vector<float>(static_cast<size_t>(rows * C))};
    gpt2_head_forward(lg, r.losses.data(), targets.data(), lw.data(), lb.data(), ws.data(), s, gd,
                      dloss_scale, workspace());
    gpt2_head_backward(r.dlnf_w.data(), r.dlnf_b.data(), r.dw.data(), lw.data(), ws.data(), lg, s,
                       sc, gd, workspace());
    EXPECT_TRUE(saved.guard_intact() && scratch.guard_intact() && logits.guard_intact());
    r.logits.assign(lg, lg + N * rows);
    r.dres.assign(sc.dres, sc.dres + N * C);
    return r;
  };
  const run a = head(plain), b = head(padded);
  auto close = [&](const char* what, const std::vector<float>& got,
                   const std::vector<float>& want) {
    ref::expect_close(std::string("padded head ") + what, vec(got.begin(), got.end()),
                      vec(want.begin(), want.end()), kAtol, kRtol);
  };
  close("losses", b.losses, a.losses);
  close("d(input)", b.dres, a.dres);
  close("d lnf.weight", b.dlnf_w, a.dlnf_w);
  close("d lnf.bias", b.dlnf_b, a.dlnf_b);
  close("d head.weight (true rows)", std::vector<float>(b.dw.begin(), b.dw.begin() + V * C), a.dw);
  std::vector<float> dlogits(static_cast<size_t>(N * V));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < Vp; ++v) {
      const float g = b.logits[static_cast<size_t>(n * Vp + v)];
      if (v < V)
        dlogits[static_cast<size_t>(n * V + v)] = g;
      else
        ASSERT_EQ(g, 0.0f) << "d(logits) row " << n << " padded column " << v;
    }
  close("d(logits) (true columns)", dlogits, a.logits);
  for (int64_t i = V * C; i < Vp * C; ++i)
    ASSERT_EQ(b.dw[static_cast<size_t>(i)], 0.0f) << "padded head row " << i / C;
}

// Embed, 2 blocks, final norm and the head tied to wte, fp32: the mean loss
// and the gradients of every tensor (sampled) against the reference model.
TEST(Gpt2Model, TinyModelLossGradients) {
  const ref::dims d = kDims;
  const gpt2_dims gd = to_gpt2(d);
  const int64_t N = d.N(), C = d.C, V = d.V, L = 2;
  const float dloss_scale = 1.0f / static_cast<float>(N);
  std::mt19937 rng(34);
  const auto tokens = ref::random_tokens(rng, N, static_cast<int32_t>(V));
  const auto targets = ref::random_tokens(rng, N, static_cast<int32_t>(V));
  const vec wte = random_vec(rng, V * C, 0.5), wpe = random_vec(rng, d.T * C, 0.5);
  std::vector<ref::block_params> blocks;
  for (int64_t l = 0; l < L; l++)
    blocks.push_back(ref::random_block(rng, d));
  const vec lnf_w = random_vec(rng, C, 0.2, 1.0), lnf_b = random_vec(rng, C, 0.1);
  auto model_loss = [&](const vec& te, const vec& pe, const std::vector<ref::block_params>& bs,
                        const vec& fw, const vec& fb) {
    vec h = ref::encoder(tokens, te, pe, d.B, d.T, C);
    for (const auto& b : bs)
      h = ref::block(h, b, d);
    return dloss_scale * ref::head_loss(h, fw, fb, te, targets, d);
  };

  // The runtime: parameters, saved slots, logits and scratch as a generated step lays them out.
  const auto wte_s = store<float>(wte), wpe_s = store<float>(wpe);
  const auto lnf_w_s = store<float>(lnf_w), lnf_b_s = store<float>(lnf_b);
  std::vector<std::vector<float>> params, grads;
  std::vector<std::vector<std::byte>> slots;
  for (int64_t l = 0; l < L; l++) {
    params.push_back(block_flat<float>(blocks[l], d));
    grads.push_back(std::vector<float>(block_flat_elems(d), 0.0f));
    slots.emplace_back(gpt2_block_saved_bytes(gd, 4));
  }
  std::vector<std::byte> final_slot(gpt2_final_norm_saved_bytes(gd, 4)),
      scratch_bytes(gpt2_backward_scratch_bytes(gd, 4));
  const auto fs = gpt2_final_norm_saved_at<float>(final_slot.data(), gd);
  const auto sc = gpt2_backward_scratch_at<float>(scratch_bytes.data(), gd);
  auto saved = [&](int64_t l) { return gpt2_block_saved_at<float>(slots[l].data(), gd); };
  auto bparams = [&](int64_t l) { return gpt2_block_params_at<float>(params[l].data(), gd); };
  std::vector<float> logits(N * V), losses(N);

  gpt2_embed_forward(saved(0).input, tokens.data(), wte_s.data(), wpe_s.data(), gd);
  for (int64_t l = 0; l < L; l++)
    gpt2_block_forward(l + 1 < L ? saved(l + 1).input : fs.input, bparams(l), saved(l), gd,
                       workspace());
  gpt2_head_forward(logits.data(), losses.data(), targets.data(), lnf_w_s.data(), lnf_b_s.data(),
                    wte_s.data(), fs, gd, dloss_scale, workspace());
  std::vector<float> dwte(V * C, 0.0f), dwpe(d.T * C, 0.0f), dlnf_w(C, 0.0f), dlnf_b(C, 0.0f);
  gpt2_head_backward(dlnf_w.data(), dlnf_b.data(), dwte.data(), lnf_w_s.data(), wte_s.data(),
                     logits.data(), fs, sc, gd, workspace());
  for (int64_t l = L - 1; l >= 0; l--)
    gpt2_block_backward(gpt2_block_grads_at<float>(grads[l].data(), gd), bparams(l), saved(l), sc,
                        gd, workspace());
  gpt2_embed_backward(dwte.data(), dwpe.data(), tokens.data(), sc, gd);

  double loss = 0.0;
  for (float l : losses)
    loss += dloss_scale * l;
  ref::expect_close("tiny model mean loss", {loss}, {model_loss(wte, wpe, blocks, lnf_w, lnf_b)},
                    kLayerAtol, kLayerRtol);
  check_sampled_grad(
      "tiny model d wte (embedding and tied head)", load(dwte), wte,
      [&](const vec& v) { return model_loss(v, wpe, blocks, lnf_w, lnf_b); }, rng);
  check_sampled_grad(
      "tiny model d wpe", load(dwpe), wpe,
      [&](const vec& v) { return model_loss(wte, v, blocks, lnf_w, lnf_b); }, rng);
  check_sampled_grad(
      "tiny model d ln_f.weight", load(dlnf_w), lnf_w,
      [&](const vec& v) { return model_loss(wte, wpe, blocks, v, lnf_b); }, rng);
  check_sampled_grad(
      "tiny model d ln_f.bias", load(dlnf_b), lnf_b,
      [&](const vec& v) { return model_loss(wte, wpe, blocks, lnf_w, v); }, rng);
  for (int64_t l = 0; l < L; l++) {
    const ref::block_params g = block_unflat(grads[l], d);
    for (const auto& [name, member] : ref::block_tensors()) {
      check_sampled_grad(
          "tiny model d h." + std::to_string(l) + "." + name, g.*member, blocks[l].*member,
          [&, m = member](const vec& v) {
            auto bs = blocks;
            bs[l].*m = v;
            return model_loss(wte, wpe, bs, lnf_w, lnf_b);
          },
          rng);
    }
  }
}

}  // namespace
