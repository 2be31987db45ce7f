// CudaMuonTest: runtime/cuda/muon.h, Muon on the device, against torch's
// fixture (tests/data/muon_reference.safetensors, as tests/runtime/
// MuonTest.cpp reads it) and against the CPU's runtime/cpu/muon.h on the same
// inputs: the owner's momentum step and Newton-Schulz (fp32 and bf16
// iterates), the gradient's scale and the skip from the device scalars, and
// the shard holder's step (Muon's updates on a matrix's slice, AdamW on the
// rest, the parameter copy). Skips, saying why, where no CUDA device is
// present.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cpu/muon.h"
#include "runtime/cpu/step.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/muon.h"
#include "runtime/cuda/step.h"
#include "runtime/files/safetensors.h"
#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"
#include "tests/common/Command.h"
#include "tests/common/MuonFixture.h"
#include "tests/cuda/Device.h"
#include "tests/cuda/GemmExec.h"

namespace {

using namespace muon_fixture;

// The device's tolerances: the CPU's (tests/common/MuonFixture.h, measured
// by tests/runtime/MuonTest.cpp: 1.6e-6 fp32, 1.0e-6 bf16, 0 momentum) times
// a margin of 2 for the device's other summation order (cuBLASLt's fp32
// GEMMs without TF32, FMA contraction in the kernels). They are expectations
// to be measured on a GPU. kBf16Gap (a bf16 run this far at least from the
// fp64 iteration) holds as on the CPU: the device's bf16 rounding is there.
constexpr double kMargin = 2;
constexpr double kDeviceFp32Tol = kFp32Tol * kMargin;
constexpr double kDeviceBf16Tol = kBf16Tol * kMargin;
constexpr double kDeviceMomentumTol = kMomentumTol * kMargin;

// A stream, cuBLASLt (handle, workspace, plan cache) and the step's scalars,
// as the CUDA backend sets them up; skips without a device.
class CudaMuon : public CudaGemmFixture {
 protected:
  void SetUp() override {
    CudaGemmFixture::SetUp();
    if (IsSkipped()) return;
    CUDA_CHECK(cudaMalloc(&g.scalars, sizeof(gpu_step_scalars)));
    set_scalars(1.0f, 1.0f);
  }
  void TearDown() override {
    if (g.scalars) cudaFree(g.scalars);
    CudaGemmFixture::TearDown();
  }
  // The step's values the kernels read: the gradients' loss scale, their
  // (all-reduced) sum of squares (not finite: the step is skipped), lr, t.
  void set_scalars(float loss_scale, float norm_sq, float lr = 0.0f, float t = 1.0f) {
    gpu_step_scalars s{};
    s.loss_scale = loss_scale;
    s.norm_sq = norm_sq;
    s.lr = lr;
    s.t = t;
    CUDA_CHECK(cudaMemcpy(g.scalars, &s, sizeof(s), cudaMemcpyHostToDevice));
  }
};

struct run_error {
  double weights = 0, momentum = 0, cpu = 0;  // cpu: the device's weights against the CPU's
  std::string worst;
};

// Steps every fixture matrix under `s`: the device orthogonalizes (momentum
// kept on the device), the update is applied on the host by muon_apply; the
// CPU's muon_step runs alongside. Each step's weights are compared with
// configuration `expected` of the fixture and with the CPU's.
run_error run_against(const fixture& f, const muon_settings& s, const std::string& expected,
                      gpu_exec& g) {
  run_error e;
  for (const fixture_matrix& fm : f.matrices) {
    const muon_matrix m{fm.rows, fm.cols, false};
    const std::vector<float> w0 = f.tensor(fm.name + ".w0");
    std::vector<float> w = w0, w_cpu = w0, momentum_cpu(w.size(), 0.0f), update(w.size());
    const int64_t ws_floats = muon_workspace_floats(m.rows, m.cols);
    std::vector<float> ws(static_cast<size_t>(ws_floats));
    device_vec<float> momentum_d(m.elems()), update_d(m.elems(), 0xff), ws_d(ws_floats, 0xff);
    for (int t = 1; t <= f.steps; ++t) {
      const std::string step = std::to_string(t);
      const std::vector<float> grad = f.tensor(fm.name + ".grad." + step);
      device_vec<float> grad_d(grad);
      cuda_muon_orthogonalize(m, s, 0.0, momentum_d.get(), grad_d.get(), dtype_id::fp32,
                              update_d.get(), ws_d.get(), ws_floats * 4, g);
      CUDA_CHECK(cudaStreamSynchronize(g.stream));
      update = update_d.download();
      muon_apply(w.data(), update.data(), m.elems(), muon_scale_of(m, s));
      muon_step(m, s, w_cpu.data(), momentum_cpu.data(), grad.data(), dtype_id::fp32, 1.0f,
                update.data(), ws.data(), ws_floats * 4);
      const std::vector<float> want = f.tensor(expected + "." + fm.name + ".w." + step);
      std::vector<float> moved = want;
      for (size_t i = 0; i < moved.size(); ++i)
        moved[i] -= w0[i];
      const double we = max_abs_diff(w, want) / max_abs(moved);
      if (we > e.weights) {
        e.weights = we;
        e.worst = fm.name + " step " + step;
      }
      e.cpu = std::max(e.cpu, max_abs_diff(w, w_cpu) / max_abs(moved));
      const std::vector<float> want_b = f.tensor(fm.name + ".momentum." + step);
      e.momentum =
          std::max(e.momentum, max_abs_diff(momentum_d.download(), want_b) / max_abs(want_b));
    }
  }
  std::printf(
      "  device against %s: weights %.3g (worst: %s), momentum %.3g; against the CPU %.3g\n",
      expected.c_str(), e.weights, e.worst.c_str(), e.momentum, e.cpu);
  return e;
}

// fp32 iterates against torch.optim.Muon with its iteration in fp64, and the CPU's.
TEST_F(CudaMuon, Fp32MatchesTorchAndTheCpu) {
  const fixture& f = reference();
  for (const char* name : {"nesterov_original", "plain_match_rms"}) {
    SCOPED_TRACE(name);
    const run_error e = run_against(f, f.settings(f.config(name)), name, g);
    EXPECT_LE(e.weights, kDeviceFp32Tol) << e.worst;
    EXPECT_LE(e.cpu, kDeviceFp32Tol);
    EXPECT_LE(e.momentum, kDeviceMomentumTol);
  }
}

// bf16 iterates against torch as shipped, and far from the fp64 iteration:
// the device rounds where torch does.
TEST_F(CudaMuon, Bf16MatchesTorchAsShipped) {
  const fixture& f = reference();
  const muon_settings s = f.settings(f.config("nesterov_original_bf16"));
  const run_error e = run_against(f, s, "nesterov_original_bf16", g);
  EXPECT_LE(e.weights, kDeviceBf16Tol) << e.worst;
  EXPECT_LE(e.cpu, kDeviceBf16Tol);
  EXPECT_LE(e.momentum, kDeviceMomentumTol);
  EXPECT_GE(run_against(f, s, "nesterov_original", g).weights, kBf16Gap);
}

std::vector<float> ramp(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = std::sin(0.7f * static_cast<float>(i) + static_cast<float>(seed)) *
           (1.0f + 0.01f * static_cast<float>(i % 7));
  return v;
}

// A bf16 gradient times the device scalars' scale (1 / loss scale, the clip
// off) equals the CPU's with grad_scale = 1 / loss scale; a tall matrix
// comes back in its stored layout. A skipped step leaves the momentum.
TEST_F(CudaMuon, GradientScaleDtypeAndSkip) {
  const muon_matrix m{40, 12};
  muon_settings s;
  std::vector<bf16> grad(static_cast<size_t>(m.elems()));
  const std::vector<float> ramp_g = ramp(m.elems(), 5);
  for (size_t i = 0; i < grad.size(); ++i)
    grad[i] = bf16_from_float(ramp_g[i] * 4.0f);
  std::vector<float> momentum = ramp(m.elems(), 6), update(grad.size());
  const int64_t ws_floats = muon_workspace_floats(m.rows, m.cols);
  std::vector<float> ws(static_cast<size_t>(ws_floats));
  device_vec<bf16> grad_d(grad);
  device_vec<float> momentum_d(momentum), update_d(m.elems(), 0xff), ws_d(ws_floats, 0xff);
  set_scalars(4.0f, 1.0f);
  cuda_muon_orthogonalize(m, s, 0.0, momentum_d.get(), grad_d.get(), dtype_id::bf16, update_d.get(),
                          ws_d.get(), ws_floats * 4, g);
  sync();
  const std::vector<float> momentum_before = momentum;
  muon_orthogonalize(m, s, momentum.data(), grad.data(), dtype_id::bf16, 0.25f, update.data(),
                     ws.data(), ws_floats * 4);
  EXPECT_LE(max_abs_diff(update_d.download(), update) / max_abs(update), kDeviceFp32Tol);
  EXPECT_LE(max_abs_diff(momentum_d.download(), momentum) / max_abs(momentum), kDeviceMomentumTol);
  EXPECT_GT(max_abs_diff(momentum, momentum_before), 0.0);  // the step did move it

  // Skipped (the norm is not finite): the momentum stays, bit for bit.
  const std::vector<float> kept = momentum_d.download();
  set_scalars(4.0f, std::numeric_limits<float>::infinity());
  cuda_muon_orthogonalize(m, s, 0.0, momentum_d.get(), grad_d.get(), dtype_id::bf16, update_d.get(),
                          ws_d.get(), ws_floats * 4, g);
  sync();
  EXPECT_EQ(momentum_d.download(), kept);
}

// Checked on the host before anything is enqueued: no device needed (the
// pointers are never touched).
TEST(CudaMuonChecks, BadInputsNameTheProblemBeforeLaunching) {
  gpu_exec g;
  float dummy[64] = {};
  const muon_settings s;
  const auto message = [&](const muon_matrix& m, const muon_settings& st, int64_t ws_bytes) {
    try {
      cuda_muon_orthogonalize(m, st, 0.0, dummy, dummy, dtype_id::fp32, dummy, dummy, ws_bytes, g);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({4, 8}, s, 16).find("too small"), std::string::npos);
  EXPECT_NE(message({0, 8}, s, 1 << 20).find("shape (0, 8)"), std::string::npos);
  muon_settings bad = s;
  bad.ns_steps = 100;
  EXPECT_NE(message({4, 8}, bad, 1 << 20).find("ns_steps 100"), std::string::npos);
  bad = s;
  bad.ns_dtype = dtype_id::fp16;
  EXPECT_NE(message({4, 8}, bad, 1 << 20).find("ns_dtype"), std::string::npos);
}

// The shard holder's step on a shard of AdamW's decayed elements, a slice of
// a Muon matrix and AdamW's undecayed ones, against the CPU's muon_apply
// and optimizer_adamw (as runtime/cpu/muon_step.cpp's muon_apply_shard calls
// them); the parameter copy is the master rounded to bf16. Skipped: the
// master stays.
TEST_F(CudaMuon, ShardStepMatchesTheCpu) {
  const int64_t n = 40, stride = 20;
  const double lr = 0.02, lr_factor = 1.5;
  gpu_muon_apply_args a{0.9f, 0.95f, 1e-8f, 0.1f, 0.5, 0.05, 0.0};
  const std::vector<gpu_muon_part> parts = {
      {0, 10, 0, 0.0, -1, 1}, {10, 30, 0, lr_factor, 0, 0}, {30, 40, 10, 0.0, -1, 0}};
  gpu_muon_tables tables = gpu_muon_tables_upload({parts}, {stride});
  std::vector<float> w = ramp(n, 1), state = ramp(2 * stride, 2), grad = ramp(n, 3),
                     update = ramp(n, 4);
  for (float& v : state)
    v = std::fabs(v) * 0.01f;  // v >= 0
  device_vec<float> w_d(w), state_d(state), grad_d(grad), update_d(update);
  device_vec<bf16> param_d(n, 0xff);
  const float loss_scale = 2.0f;
  set_scalars(loss_scale, 1.0f, static_cast<float>(lr), 3.0f);
  cuda_muon_apply_shard(tables.units[0], n, w_d.get(), state_d.get(), grad_d.get(), dtype_id::fp32,
                        update_d.get(), param_d.get(), dtype_id::bf16, a, g);
  sync();
  const float scale = 1.0f / loss_scale;
  const double lr_d = static_cast<float>(lr);  // the device reads the step's lr as fp32
  const float adamw_lr = static_cast<float>(lr_d * a.adamw_lr_ratio);
  float* m1 = state.data();
  float* m2 = state.data() + stride;
  optimizer_adamw(w.data(), m1, m2, grad.data(), dtype_id::fp32, 0, 10, adamw_lr, a.adamw_beta1,
                  a.adamw_beta2, a.adamw_eps, a.adamw_weight_decay, true, 3, scale);
  optimizer_adamw(w.data() + 30, m1 + 10, m2 + 10, grad.data() + 30, dtype_id::fp32, 0, 10,
                  adamw_lr, a.adamw_beta1, a.adamw_beta2, a.adamw_eps, a.adamw_weight_decay, false,
                  3, scale);
  const muon_scale k{static_cast<float>(1.0 - lr_d * a.weight_decay),
                     static_cast<float>(lr_d * lr_factor)};
  muon_apply(w.data() + 10, update.data() + 10, 20, k);
  const std::vector<float> got = w_d.download();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(got[i], w[i], 1e-6 * std::max(1.0f, std::fabs(w[i]))) << "element " << i;
  EXPECT_LE(max_abs_diff(state_d.download(), state), 1e-6);
  const std::vector<bf16> param = param_d.download();
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(bf16_to_float(param[i]), bf16_to_float(bf16_from_float(got[i]))) << "element " << i;

  // Skipped: nothing moves.
  set_scalars(loss_scale, std::numeric_limits<float>::quiet_NaN(), static_cast<float>(lr), 4.0f);
  cuda_muon_apply_shard(tables.units[0], n, w_d.get(), state_d.get(), grad_d.get(), dtype_id::fp32,
                        update_d.get(), nullptr, dtype_id::fp32, a, g);
  sync();
  EXPECT_EQ(w_d.download(), got);
  gpu_muon_tables_destroy(tables);
}

// A parts table that leaves a gap is refused at set-up, naming the unit.
// Checked before any allocation: no device needed.
TEST(CudaMuonChecks, PartsWithAGapAreRefused) {
  const std::vector<gpu_muon_part> parts = {{0, 10, 0, 0.0, -1, 0}, {12, 20, 10, 0.0, -1, 0}};
  try {
    gpu_muon_tables_upload({parts}, {20});
    FAIL() << "a gap was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("unit 0"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- the step functions

// One unit held whole (a shard group of one): AdamW's decayed elements
// [0, 10), a (6, 4) Muon matrix at 10, AdamW's undecayed elements [34, 40).
// Three steps of the generated code's calls on the device
// (step_muon_orthogonalize, then step_optimizer with the updates) against
// the same calls on the CPU: the layout, its device tables and the offsets
// between them.
class muon_program {
 public:
  muon_program() {
    unit_.name = "unit";
    unit_.param_elems = unit_.padded_elems = unit_.shard_elems = 40;
    unit_.param_shard = unit_.master = unit_.optimizer_state = unit_.grad_shard = -1;
    unit_.grad_shard_dtype = dtype_id::fp32;
    matrix_ = {0, 10, 6, 4, false, 0, 0, 0};
    p_.parallel.world = p_.parallel.shard_group = 1;
    p_.parallel.precision.param = p_.parallel.precision.reduce = p_.parallel.precision.master =
        dtype_id::fp32;
    program_optimizer& o = p_.train.optimizer;
    o.kind = optimizer_kind::muon;
    o.lr = 0.02;
    o.momentum = 0.95;
    o.weight_decay = 0.1;
    o.adamw_lr = 0.001;
    o.adamw_beta1 = 0.9;
    o.adamw_beta2 = 0.95;
    o.adamw_eps = 1e-8;
    o.adamw_weight_decay = 0.1;
    p_.units = &unit_;
    p_.unit_count = 1;
    p_.muon_matrices = &matrix_;
    p_.muon_matrix_count = 1;
    decay_.ranges = {{0, 10}};
    decay_.pointers = {decay_.ranges[0].data()};
    decay_.counts = {1};
  }
  muon_program(const muon_program&) = delete;
  muon_program& operator=(const muon_program&) = delete;
  const program& get() const { return p_; }
  const optimizer_decay_table& decay() const { return decay_; }

 private:
  program p_{};
  program_unit unit_{};
  program_muon_matrix matrix_{};
  optimizer_decay_table decay_;
};

TEST_F(CudaMuon, StepFunctionsMatchTheCpu) {
  const muon_program mp;
  const program& p = mp.get();
  muon_layout layout = muon_layout_of(p, 0, mp.decay());
  const int64_t n = 40, stride = layout.units[0].state_stride;
  ASSERT_EQ(stride, 16);
  gpu_muon_tables tables = gpu_muon_tables_create(p, layout);
  gpu_context gc;
  gc.exec = g;
  gc.muon_units = tables.units.data();
  step_context cpu, gpu_c;
  cpu.p = gpu_c.p = &p;
  cpu.muon = gpu_c.muon = &layout;
  gpu_c.gpu = &gc;
  cpu.grad_norm_partial = 1;  // finite: no step is skipped
  const int64_t ws_floats = muon_workspace_floats(6, 4);
  std::vector<float> w = ramp(n, 7), state(static_cast<size_t>(2 * stride), 0.0f),
                     momentum(24, 0.0f), update(n, 0.0f), ws(static_cast<size_t>(ws_floats));
  device_vec<float> w_d(w), state_d(state), momentum_d(momentum), update_d(n, 0),
      ws_d(ws_floats, 0xff);
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> grad = ramp(n, 10 + t);
    device_vec<float> grad_d(grad);
    cpu.lr = gpu_c.lr = 0.02 * t / 3;  // a schedule's changing lr
    cpu.optimizer_step = t;
    set_scalars(1.0f, 1.0f, static_cast<float>(cpu.lr), static_cast<float>(t));
    step_muon_orthogonalize(cpu, 0, grad.data(), nullptr, momentum.data(), ws.data(),
                            update.data());
    step_optimizer(cpu, 0, w.data(), nullptr, state.data(), grad.data(), update.data());
    step_muon_orthogonalize(gpu_c, 0, grad_d.get(), nullptr, momentum_d.get(), ws_d.get(),
                            update_d.get(), gc.exec);
    step_optimizer(gpu_c, 0, w_d.get(), nullptr, state_d.get(), grad_d.get(), update_d.get(),
                   gc.exec);
    sync();
    const std::vector<float> got = w_d.download();
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(got[i], w[i], 1e-6) << "step " << t << ", element " << i;
    EXPECT_LE(max_abs_diff(momentum_d.download(), momentum),
              kDeviceMomentumTol * max_abs(momentum));
    EXPECT_LE(max_abs_diff(state_d.download(), state), 1e-6);
  }
  gpu_muon_tables_destroy(tables);
}

// ---------------------------------------------------------------- the exchanges

// cuda_muon_check (tests/cuda/CudaMuonCheck.cpp) on two ranks: the gather
// and the scatter in the MPI test mode (ranks sharing a GPU) and, where each
// rank has a GPU, over NCCL. Skips, with its reason, without a device.
TEST(CudaMuonExchange, TwoRanksGatherAndScatterExactly) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMP_NUM_THREADS", "1", 1);
  const fsdpgen::test::CmdResult r = fsdpgen::test::run_command(
      std::string("timeout 300 mpirun -n 2 --oversubscribe --bind-to none ") + CUDA_MUON_CHECK_BIN);
  if (r.status == 77) {
    const size_t at = r.out.find("no CUDA device:");
    GTEST_SKIP() << (at == std::string::npos ? r.out : r.out.substr(at, r.out.find('\n', at) - at));
  }
  EXPECT_NE(r.status, 124) << "timed out: the ranks hung\n" << r.out;
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check(s) run, 0 failed"), std::string::npos) << r.out;
}

}  // namespace
