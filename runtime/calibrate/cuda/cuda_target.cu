// cuda_target: the CUDA runtime on this rank's GPU: layer passes
// (cuda_layers.h), the optimizer and other element-wise ops through
// runtime/cuda/step.h, Muon's owner step through runtime/cuda/muon.h, NCCL collectives through
// runtime/cuda/comm.h (Muon's send_recv exchange with ncclSend and ncclRecv), pinned host <->
// device copies, and an empty kernel's launch as an op's hand-off.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "runtime/calibrate/collectives.h"
#include "runtime/calibrate/cuda/cuda_layers.h"
#include "runtime/calibrate/cuda/gpu.h"
#include "runtime/calibrate/layers.h"
#include "runtime/calibrate/muon_ns.h"
#include "runtime/calibrate/target.h"
#include "runtime/check.h"
#include "runtime/cuda/comm.h"
#include "runtime/cuda/cublas_check.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/muon.h"
#include "runtime/cuda/step.h"

namespace {

namespace profile = fsdpgen::profile;

constexpr int64_t kLaunchesPerRun = 100;

__global__ void empty_kernel() {}

// Pinned host memory (cudaHostAlloc), as the runtime's offload arena.
class pinned_buffer {
 public:
  explicit pinned_buffer(int64_t bytes) {
    CUDA_CHECK(cudaHostAlloc(&data_, static_cast<size_t>(bytes), cudaHostAllocDefault));
    std::memset(data_, 0, static_cast<size_t>(bytes));
  }
  ~pinned_buffer() { cudaFreeHost(data_); }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
};

// A unit's optimizer step over `elems` elements as step_optimizer runs it:
// one unit, all of it decayed, gradients of `t`, fp32 params (no master).
struct optimizer_unit {
  program_unit unit{};
  program p{};
  int64_t decayed[2];
  const int64_t* decay_ranges[1];
  int decay_counts[1] = {1};
  gpu_context gc{};
  step_context c{};

  optimizer_unit(const std::string& op, int64_t elems, dtype_id t, const gpu_exec& g)
      : decayed{0, elems} {
    unit.shard_elems = elems;
    unit.grad_shard_dtype = t;
    p.units = &unit;
    p.unit_count = 1;
    p.train.optimizer = {op == "adamw" ? optimizer_kind::adamw : optimizer_kind::sgd,
                         1e-4,
                         0.9,
                         0.95,
                         1e-8,
                         0.1,
                         0.9};
    p.train.clip = 1.0;
    decay_ranges[0] = decayed;
    gc.exec = g;
    gc.decay_ranges = decay_ranges;
    gc.decay_range_counts = decay_counts;
    c.p = &p;
    c.gpu = &gc;
  }
};

class cuda final : public calibrate_target {
 public:
  // Selects the device first: everything after lives on it.
  cuda() : device_(gpu_select_device(gpu_comm_mode::nccl)), scalars_(small_bytes()) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&exec_.stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasLtCreate(&exec_.lt));
    exec_.gemms = gpu_gemm_cache_create();
    exec_.scalars = scalars_.as<gpu_step_scalars>();
    exec_.loss_scratch = reinterpret_cast<float*>(exec_.scalars + 1);
    exec_.norm_scratch = exec_.loss_scratch + kReduceScratchFloats;
    // A step's inputs: learning rate, step 1, a loss scale of 1, a finite norm.
    constexpr float kNoLimit = std::numeric_limits<float>::infinity();
    const gpu_step_scalars s{.lr = 1e-4f,
                             .t = 1,
                             .dloss_scale = 1.0f / 1024,
                             .loss_scale = 1,
                             .norm_limit = kNoLimit,
                             .loss_total_limit = kNoLimit,
                             .loss_sum = 0,
                             .norm_sq = 1,
                             .loss_total = 0};
    CUDA_CHECK(cudaMemcpy(exec_.scalars, &s, sizeof s, cudaMemcpyHostToDevice));
  }
  ~cuda() override {
    for (auto& [ranks, comm] : nccl_)
      ncclCommDestroy(comm);
    gpu_gemm_cache_destroy(exec_.gemms);
    cublasLtDestroy(exec_.lt);
    cudaStreamDestroy(exec_.stream);
  }

  profile::Device describe(const std::string& base) const override {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    return {"cuda", prop.name, base, prop.multiProcessorCount,
            static_cast<int64_t>(prop.totalGlobalMem)};
  }
  std::string layer_problem(const profile::LayerTime& l) const override {
    return ::layer_problem(l);  // the same (param, grad) pairs as the CPU runtime's
  }
  int64_t enter_compute(int64_t ranks_per_node, bool) override {
    return threads_per_rank(ranks_per_node);
  }

  // One empty kernel launch, with the launches back to back on the stream.
  measurement op_overhead(const measure_options& o) override {
    return measure(o, [&] {
      const double s = seconds_of([&] {
        for (int64_t i = 0; i < kLaunchesPerRun; ++i)
          empty_kernel<<<1, 1, 0, exec_.stream>>>();
        CUDA_CHECK(cudaGetLastError());
        CUDA_CHECK(cudaStreamSynchronize(exec_.stream));
      });
      return s / static_cast<double>(kLaunchesPerRun);
    });
  }

  measurement layer(const profile::LayerTime& l, const measure_options& o) override {
    return cuda_measure_layer(l, exec_, o);
  }

  measurement elementwise(const profile::ElementwiseTime& e, const measure_options& o) override {
    std::mt19937 rng(1234);
    const int64_t n = e.elems;
    const dtype_id t = dtype_named(e.dtype);
    device_buffer master(n * 4), grad(n * dtype_size(t));
    upload_normal(master.data(), dtype_id::fp32, n, 0.02f, rng);
    upload_normal(grad.data(), t, n, 1e-3f, rng);
    gpu_exec& g = exec_;
    if (e.op == "convert") {
      device_buffer params(n * dtype_size(t));
      return timed(
          o, [&] { tensor_convert(params.data(), t, master.data(), dtype_id::fp32, n, false, g); });
    }
    optimizer_unit u(e.op, n, t, g);
    if (e.op == "grad_norm")
      return timed(o, [&] { step_add_grad_norm(u.c, grad.data(), t, n, g); });
    device_buffer state(2 * n * 4);  // adamw: m then v; sgd: the momentum buffer
    return timed(o, [&] {
      step_optimizer(u.c, 0, master.data(), nullptr, state.as<float>(), grad.data(), g);
    });
  }

  // As the CPU's measure_muon_ns; clip 1 with the scalars' norm of 1: a
  // gradient factor of 1.
  measurement muon_ns(const profile::MuonNsTime& e, const measure_options& o) override {
    std::mt19937 rng(1234);
    const muon_matrix m{e.rows, e.cols, false};
    const muon_settings s = muon_ns_settings(e);
    const int64_t workspace_bytes = muon_workspace_bytes(m.rows, m.cols);
    device_buffer grad(m.elems() * 4), momentum(m.elems() * 4), update(m.elems() * 4),
        workspace(workspace_bytes);
    upload_normal(grad.data(), dtype_id::fp32, m.elems(), 1e-3f, rng);
    return timed(o, [&] {
      cuda_muon_orthogonalize(m, s, 1.0, momentum.as<float>(), grad.data(), dtype_id::fp32,
                              update.as<float>(), workspace.data(), workspace_bytes, exec_);
    });
  }

  measurement collective(const profile::CollectiveTime& c, MPI_Comm group,
                         const measure_options& o) override {
    gpu_comm comm;
    comm.nccl = nccl_of(c.ranks, group);
    MPI_CHECK(MPI_Comm_rank(group, &comm.rank));
    MPI_CHECK(MPI_Comm_size(group, &comm.size));
    const dtype_id t = dtype_named(c.dtype);
    const collective_buffers b = collective_buffers_of(c);
    std::optional<device_buffer> send, recv;
    ranks_all_or_none(group, [&] {
      send.emplace(b.send_bytes);
      recv.emplace(b.recv_bytes);
    });
    if (collective_reduces(c)) {
      std::mt19937 rng(1234);
      upload_normal(send->data(), t, b.send_bytes / dtype_size(t), 1e-3f, rng);
    }
    return measure(o, [&] {
      ranks_barrier(group);
      const double s = gpu_seconds_of(exec_.stream, [&] {
        if (c.op == "send_recv") {  // as runtime/cuda/muon_step.cpp's exchanges
          const int next = (comm.rank + 1) % comm.size,
                    prev = (comm.rank + comm.size - 1) % comm.size;
          NCCL_CHECK(ncclGroupStart());
          NCCL_CHECK(ncclRecv(recv->data(), static_cast<size_t>(b.count), ncclUint8, prev,
                              comm.nccl, exec_.stream));
          NCCL_CHECK(ncclSend(send->data(), static_cast<size_t>(b.count), ncclUint8, next,
                              comm.nccl, exec_.stream));
          NCCL_CHECK(ncclGroupEnd());
        } else if (c.op == "all_gather")
          comm_all_gather(comm, send->data(), recv->data(), b.count, exec_);
        else if (c.op == "reduce_scatter")
          comm_reduce_scatter(comm, send->data(), recv->data(), b.count, t, exec_);
        else
          comm_all_reduce(comm, send->data(), recv->data(), b.count, t, exec_);
      });
      return ranks_max(s, group);
    });
  }

  measurement copy(const profile::CopyTime& c, const measure_options& o) override {
    pinned_buffer host(c.bytes);
    device_buffer device(c.bytes);
    const bool to_device = c.op == "h2d";
    void* dst = to_device ? device.data() : host.data();
    const void* src = to_device ? host.data() : device.data();
    return timed(o, [&] { cuda_copy(dst, src, c.bytes, exec_); });
  }

 private:
  static int64_t small_bytes() {
    return static_cast<int64_t>(sizeof(gpu_step_scalars) +
                                2 * kReduceScratchFloats * sizeof(float));
  }

  // Times the work f() issues on the compute stream.
  template <class F>
  measurement timed(const measure_options& o, F&& f) {
    return measure(o, [&] { return gpu_seconds_of(exec_.stream, f); });
  }

  // The NCCL communicator of the first `ranks` ranks (made once; collective
  // over `group`).
  ncclComm_t nccl_of(int64_t ranks, MPI_Comm group) {
    auto it = nccl_.find(ranks);
    if (it != nccl_.end()) return it->second;
    int rank = 0;
    MPI_CHECK(MPI_Comm_rank(group, &rank));
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group));
    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommInitRank(&comm, static_cast<int>(ranks), id, rank));
    nccl_[ranks] = comm;
    return comm;
  }

  int device_ = 0;
  device_buffer scalars_;
  gpu_exec exec_;
  std::map<int64_t, ncclComm_t> nccl_;
};

}  // namespace

std::unique_ptr<calibrate_target> cuda_target() {
  return std::make_unique<cuda>();
}
