// block_speed: the CPU runtime's GPT-2 block (runtime/cpu/gpt2.h) timed forward
// and backward on one thread, fp32 and bf16, printed; a benchmark, not a test
// (built with the tests, not run by CTest): build/tests/block_speed
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <random>
#include <vector>

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/gpt2.h"
#include "tests/runtime/BlockLayout.h"
#include "tests/runtime/Reference.h"

namespace {

gemm_workspace workspace() {
  static std::vector<float> buf(kCpuGemmWorkspaceBytes / sizeof(float));
  return gemm_workspace{buf.data(), static_cast<int64_t>(buf.size())};
}

// The best of 6 runs of f (the first a warm-up), in seconds.
template <class F>
double best_seconds(F&& f) {
  double best = 1e30;
  for (int rep = 0; rep < 6; rep++) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Speed of one block at B=8, T=128, C=128, H=4, F=512 on one thread (OpenMP
// and OpenBLAS). FLOPs count every GEMM densely: forward 2N(4C^2 + 2CF) for
// the matmuls plus 4BT^2C for attention's two (T x T) products per head;
// backward twice that.
template <class T>
void print_block_speed() {
  const ref::dims d{8, 128, 128, 4, 512, 0};
  const gpt2_dims gd = ref::to_gpt2(d);
  const int64_t N = d.N(), C = d.C, F = d.F;
  std::mt19937 rng(35);
  auto params = ref::block_flat<T>(ref::random_block(rng, d), d);
  std::vector<T> grads(ref::block_flat_elems(d), from_float<T>(0.0f)), out(N * C);
  std::vector<std::byte> saved(gpt2_block_saved_bytes(gd, sizeof(T))),
      scratch(gpt2_backward_scratch_bytes(gd, sizeof(T)));
  const auto s = gpt2_block_saved_at<T>(saved.data(), gd);
  const auto sc = gpt2_backward_scratch_at<T>(scratch.data(), gd);
  const auto bp = gpt2_block_params_at<T>(params.data(), gd);
  const auto bg = gpt2_block_grads_at<T>(grads.data(), gd);
  const auto x = ref::store<T>(ref::random_vec(rng, N * C)),
             dout = ref::store<T>(ref::random_vec(rng, N * C));
  std::copy(x.begin(), x.end(), s.input);

  const double fwd_s =
      best_seconds([&] { gpt2_block_forward(out.data(), bp, s, gd, workspace()); });
  const double bwd_s = best_seconds([&] {
    std::copy(dout.begin(), dout.end(), sc.dres);
    gpt2_block_backward(bg, bp, s, sc, gd, workspace());
  });

  const double flops = 2.0 * N * (4 * C * C + 2 * C * F) + 4.0 * d.B * d.T * d.T * C;
  std::printf(
      "gpt2 block <%s> B=%lld T=%lld C=%lld H=%lld F=%lld, 1 thread: forward %.2f ms "
      "(%.1f GFLOP/s), backward %.2f ms (%.1f GFLOP/s), both %.1f GFLOP/s\n",
      ref::type_name<T>(), static_cast<long long>(d.B), static_cast<long long>(d.T),
      static_cast<long long>(C), static_cast<long long>(d.H), static_cast<long long>(F),
      fwd_s * 1e3, flops / fwd_s * 1e-9, bwd_s * 1e3, 2 * flops / bwd_s * 1e-9,
      3 * flops / (fwd_s + bwd_s) * 1e-9);
}

}  // namespace

int main() {
  omp_set_num_threads(1);
  openblas_set_num_threads(1);
  print_block_speed<float>();
  print_block_speed<bf16>();
  return 0;
}
