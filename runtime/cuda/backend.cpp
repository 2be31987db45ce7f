// backend (CUDA): set-up, the step, host copies of the weights, teardown.
#include "runtime/cuda/backend.h"

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/check.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/cuda/executor.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/step.h"
#include "runtime/machine_memory.h"
#include "runtime/model/llama.h"

namespace {

int64_t device_used_bytes() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(total - free);
}

// The cuDNN graphs' shapes a program's attention runs with: the window and
// the scale as the generated llama_dims carry them (codegen/emit/Emit.cpp's
// model_dims; both from runtime/model/llama.h's attention_window_of and
// attention_scale_of): the
// window where shorter than the context, and where layers alternate (Gemma 2
// and 3: global_every) the global layers' shape without it as well; the
// scale query_pre_attn_scalar^-0.5 as a float unless that is the head size.
std::vector<cudnn_attention_shape> attention_shapes(const program& p) {
  const program_model& m = p.model;
  const int64_t hs = m.head_size();
  const int64_t window = fsdpgen::model::attention_window_of(m.sliding_window, m.context);
  const auto scale =
      static_cast<float>(fsdpgen::model::attention_scale_of(m.query_pre_attn_scalar, hs));
  const cudnn_attention_shape local{p.parallel.micro_batch,
                                    m.context,
                                    m.heads * hs,
                                    m.heads,
                                    p.parallel.precision.param,
                                    m.family == model_family::llama ? m.kv_heads : 0,
                                    hs,
                                    window,
                                    scale};
  if (m.global_every == 0 || window == 0) return {local};
  cudnn_attention_shape global = local;
  global.window = 0;
  return {global, local};
}

class cuda_backend final : public backend {
 public:
  explicit cuda_backend(const program& p) : p_(p) {}
  ~cuda_backend() override { release(true); }  // after a failure: abort the communicators

  void start(step_context& c, arena& mem, const backend_options& o) override {
    c_ = &c;
    mem_ = &mem;
    const gpu_comm_mode mode = o.comm == "mpi-test" ? gpu_comm_mode::mpi_test : gpu_comm_mode::nccl;
    device_ = gpu_select_device(mode);
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    device_name_ = prop.name;
    const int64_t used_before_arena = device_used_bytes();

    // The arena: the planned bytes and a guard region after them.
    const size_t bytes = static_cast<size_t>(p_.plan.device_arena_bytes + kArenaGuardBytes);
    cudaError_t err = cudaMalloc(reinterpret_cast<void**>(&mem.device), bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw runtime_error(fmt::format(
          "cannot allocate the device arena of {:.2f} GiB planned for this rank on GPU {} ({}): "
          "{:.2f} GiB of {:.2f} GiB free; `fsdpgen plan SPEC --gpu KIND` shows what fits",
          static_cast<double>(p_.plan.device_arena_bytes) / (1 << 30), device_, device_name_,
          static_cast<double>(free) / (1 << 30), static_cast<double>(total) / (1 << 30)));
    }
    mem.device_bytes = p_.plan.device_arena_bytes;
    CUDA_CHECK(cudaMemset(mem.device, 0, static_cast<size_t>(p_.plan.device_arena_bytes)));
    CUDA_CHECK(
        cudaMemset(mem.device + p_.plan.device_arena_bytes, kArenaGuardByte, kArenaGuardBytes));
    // The driver's own count of what the arena took (the whole device's: a
    // process sharing the GPU and allocating now would show here too).
    arena_used_bytes_ = device_used_bytes() - used_before_arena;
    c.device = mem.device;
    const int64_t before_host_arena = host_resident_bytes_exact();
    allocate_host_arena(mem);
    host_arena_growth_ = host_resident_bytes_exact() - before_host_arena;
    c.host = mem.host;

    // Per-step scalars and reduction scratch (device), their pinned mirrors, the step's tokens.
    const size_t small = sizeof(gpu_step_scalars) + 2 * kReduceScratchFloats * sizeof(float);
    CUDA_CHECK(cudaMalloc(&small_, small));
    CUDA_CHECK(cudaMemset(small_, 0, small));
    gpu_exec& g = gc_.exec;
    g.scalars = static_cast<gpu_step_scalars*>(small_);
    g.loss_scratch = reinterpret_cast<float*>(g.scalars + 1);
    g.norm_scratch = g.loss_scratch + kReduceScratchFloats;
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&gc_.host_scalars), sizeof(gpu_step_scalars),
                             cudaHostAllocDefault));
    *gc_.host_scalars = gpu_step_scalars{};  // zero, the guard's limits off
    tokens_per_mb_ = p_.parallel.micro_batch * p_.model.context;
    CUDA_CHECK(cudaHostAlloc(
        reinterpret_cast<void**>(&gc_.host_inputs),
        static_cast<size_t>(p_.parallel.micro_batches * 2 * tokens_per_mb_) * sizeof(int32_t),
        cudaHostAllocDefault));
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&eval_losses_),
                             static_cast<size_t>(tokens_per_mb_) * sizeof(float),
                             cudaHostAllocDefault));

    // cuBLASLt: the handle, the algorithm cache and the plan's workspace.
    CUBLAS_CHECK(cublasLtCreate(&g.lt));
    g.gemms = gpu_gemm_cache_create();
    if (p_.plan.workspace_buffer >= 0) {
      const program_buffer& w = p_.buffers[p_.plan.workspace_buffer];
      g.lt_workspace = mem.device + w.offset;
      g.lt_workspace_bytes = w.bytes;
    }
    // Attention: 16-bit flash attention through cuDNN where this build has
    // it, its graphs built now (a shape cuDNN refuses, or a workspace the plan
    // did not reserve, stops every rank at set-up); else the flash kernels.
    attention_ =
        choose_attention(p_.plan.flash_attention, p_.parallel.precision.param, p_.model.head_size(),
                         p_.model.context, static_cast<float>(p_.model.attention_softcap),
                         cudnn_attention_built(), std::getenv("FSDPGEN_ATTENTION"));
    if (attention_.kernels == attention_kernels::cudnn) {
      g.attention = gpu_attention_create();
      for (const cudnn_attention_shape& s : attention_shapes(p_))
        gpu_attention_prepare(*g.attention, s, g.lt_workspace_bytes);
    }

    gc_.comms = gpu_comm_create(p_, mode, c.comms);
    comms_created_ = true;
    gc_.decay_ranges = c.decay_ranges;
    gc_.decay_range_counts = c.decay_range_counts;
    // optimizer = muon(...): the shard parts the optimizer kernel reads,
    // from the layout the run built (c.muon), on the device once.
    if (c.muon) {
      muon_tables_ = gpu_muon_tables_create(p_, *c.muon);
      gc_.muon_units = muon_tables_.units.data();
    } else if (p_.train.optimizer.kind == optimizer_kind::muon) {
      throw runtime_error(
          "optimizer = muon(...): the CUDA backend started without the Muon layout (the training "
          "run builds it before the backend starts)");
    }
    c.gpu = &gc_;
    mode_ = mode;
    // No graph in the test mode (its collectives are host-synchronous), nor
    // with offload: the ops run on the host are handed to the host worker as
    // the step is issued, and it waits for events recorded then, which a
    // graph's replay would neither do nor record (runtime/cuda/executor.h).
    graphs_ = o.graphs && mode == gpu_comm_mode::nccl && p_.host_op_count == 0;
    profile_step_ = o.profile_step;
    for (int i = 0; i < p_.host_op_count; ++i)
      host_norm_ = host_norm_ || p_.ops[p_.host_ops[i]].kind == op_kind::grad_norm;
    gpu_executor_start(exec_, p_, c, gc_, graphs_);
  }

  std::string describe() const override {
    return fmt::format("GPU {} ({}), {}, {}{}, attention: {}", device_, device_name_,
                       mode_ == gpu_comm_mode::nccl ? "NCCL" : "MPI test mode (host staging)",
                       graphs_ ? "CUDA graph" : "no CUDA graph",
                       p_.host_op_count > 0 ? ", optimizer on the host (offload)" : "",
                       attention_.why);
  }

  void with_host_weights(step_context& c, bool write_back,
                         const std::function<void()>& fn) override {
    int64_t extent = 0;
    for (int b = 0; b < p_.buffer_count; ++b)
      if (persistent_device(b))
        extent = std::max(extent, p_.buffers[b].offset + p_.buffers[b].bytes);
    std::unique_ptr<std::byte[]> mirror(new std::byte[static_cast<size_t>(extent)]);
    for (int b = 0; b < p_.buffer_count; ++b) {
      if (!persistent_device(b)) continue;
      const program_buffer& buf = p_.buffers[b];
      CUDA_CHECK(cudaMemcpy(mirror.get() + buf.offset, mem_->device + buf.offset,
                            static_cast<size_t>(buf.bytes), cudaMemcpyDeviceToHost));
    }
    c.device = mirror.get();
    try {
      fn();
    } catch (...) {
      c.device = mem_->device;
      throw;
    }
    c.device = mem_->device;
    if (!write_back) return;
    for (int b = 0; b < p_.buffer_count; ++b) {
      if (!persistent_device(b)) continue;
      const program_buffer& buf = p_.buffers[b];
      CUDA_CHECK(cudaMemcpy(mem_->device + buf.offset, mirror.get() + buf.offset,
                            static_cast<size_t>(buf.bytes), cudaMemcpyHostToDevice));
    }
  }

  // Straight from the device arena into the (pinned) staging buffer: no host mirror.
  void copy_to_host(step_context&, int buffer, std::byte* to) override {
    const program_buffer& buf = p_.buffers[buffer];
    if (buf.space == memory_space::host) {
      std::memcpy(to, mem_->host + buf.offset, static_cast<size_t>(buf.bytes));
      return;
    }
    CUDA_CHECK(cudaDeviceSynchronize());  // the step's last writes (optimizer) on any stream
    CUDA_CHECK(cudaMemcpy(to, mem_->device + buf.offset, static_cast<size_t>(buf.bytes),
                          cudaMemcpyDeviceToHost));
  }

  step_result run_step(int64_t step, double lr, bool timed) override {
    step_context& c = *c_;
    c.step = step;
    c.lr = lr;
    c.grad_norm_partial = 0;  // offload: the host's sum of squares
    for (int64_t mb = 0; mb < p_.parallel.micro_batches; ++mb) {
      int32_t* in = gc_.host_inputs + mb * 2 * tokens_per_mb_;
      step_fill_inputs(c, mb, in, in + tokens_per_mb_);
    }
    gpu_step_scalars& s = *gc_.host_scalars;
    s.lr = static_cast<float>(lr);
    s.t = static_cast<float>(c.optimizer_step);
    s.loss_scale = c.grad_scale;
    s.dloss_scale = c.dloss_scale;
    s.norm_limit = c.norm_limit;
    s.loss_total_limit = c.loss_total_limit;
    s.loss_factor = c.inject_loss_factor;
    const bool profiled = step == profile_step_;
    if (profiled) {  // nothing of the steps before may fall inside the profiled range
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaProfilerStart());
    }
    gpu_executor_run_step(exec_, runs_++, timed);  // its steps count from 0 (capture: 1)
    if (profiled) {
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaProfilerStop());
    }
    check_guard();
    // Offload: the norm the host's optimizer used (the device computed none).
    return step_result_of(s.loss_sum, host_norm_ ? c.grad_norm_partial : s.norm_sq, c,
                          host_norm_ ? c.loss_total : s.loss_total);
  }

  double run_validation(int64_t pass, int64_t rows) override {
    step_context& c = *c_;
    c.validation_pass = pass;
    c.loss_rows = rows;
    gc_.host_scalars->loss_factor = 1;  // a validation pass counts its losses as they are
    step_fill_inputs(c, 0, gc_.host_inputs, gc_.host_inputs + tokens_per_mb_);
    gpu_executor_run_prefix(exec_, static_cast<int>(p_.plan.validation_op_count));
    c.validation_pass = -1;  // a failure above ends the run: nothing to restore
    check_guard();
    return gc_.host_scalars->loss_sum;
  }

  // The losses come back through a pinned buffer (step_add_losses' copy).
  void run_eval(const int32_t* inputs, float* losses) override {
    c_->eval_inputs = inputs;
    c_->eval_losses = eval_losses_;
    run_validation(0, p_.parallel.micro_batch);
    c_->eval_inputs = nullptr;  // a failure above ends the run: nothing to restore
    c_->eval_losses = nullptr;
    std::memcpy(losses, eval_losses_, static_cast<size_t>(tokens_per_mb_) * sizeof(float));
  }

  const std::vector<int64_t>& op_start_ns() const override { return exec_.start_ns; }
  const std::vector<int64_t>& op_end_ns() const override { return exec_.end_ns; }
  // Step 0 chooses GEMM algorithms; step 1 captures the graph.
  int64_t warmup_steps() const override { return graphs_ ? 2 : 1; }

  memory_reading read_memory() const override {
    memory_reading m;
    m.host_resident_bytes = host_resident_bytes();
    m.host_anonymous_bytes = host_anonymous_resident_bytes();
    if (mem_->host)
      m.arena_resident_bytes =
          host_resident_bytes_in(mem_->host, p_.plan.host_arena_bytes + kArenaGuardBytes);
    m.arena_growth_bytes = host_arena_growth_;
    m.device_used_bytes = device_used_bytes();
    m.device_arena_bytes = arena_used_bytes_;
    return m;
  }

  void stop() override {
    CUDA_CHECK(cudaDeviceSynchronize());
    release(false);
  }

 private:
  bool persistent_device(int b) const {
    return p_.buffers[b].persistent && p_.buffers[b].space == memory_space::device &&
           p_.buffers[b].bytes > 0;
  }

  // Offload: the host arena, one pinned allocation (plus a guard region) that
  // copies on the copy stream reach asynchronously and kernels address
  // directly (unified addressing: a pinned page's host address is its device
  // address), so that a D2H op converts into it as a kernel.
  void allocate_host_arena(arena& mem) {
    if (p_.plan.host_arena_bytes <= 0) return;
    const size_t bytes = static_cast<size_t>(p_.plan.host_arena_bytes + kArenaGuardBytes);
    const cudaError_t err =
        cudaHostAlloc(reinterpret_cast<void**>(&mem.host), bytes, cudaHostAllocDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      mem.host = nullptr;
      throw runtime_error(fmt::format(
          "cannot pin the host arena of {:.2f} GiB planned for this rank (offload, checkpoint "
          "staging): "
          "cudaHostAlloc failed: {}; pinned memory comes out of the node's RAM (and `ulimit -l`)",
          static_cast<double>(p_.plan.host_arena_bytes) / (1 << 30), cudaGetErrorString(err)));
    }
    mem.host_bytes = p_.plan.host_arena_bytes;
    cudaPointerAttributes a{};
    CUDA_CHECK(cudaPointerGetAttributes(&a, mem.host));
    if (a.type != cudaMemoryTypeHost || a.devicePointer != mem.host)
      throw runtime_error(fmt::format(
          "GPU {} ({}) does not address pinned host memory at its host address (no unified "
          "addressing), which offload = cpu needs",
          device_, device_name_));
    std::memset(mem.host, 0, static_cast<size_t>(p_.plan.host_arena_bytes));
    std::memset(mem.host + p_.plan.host_arena_bytes, kArenaGuardByte, kArenaGuardBytes);
  }

  // The device arena's guard, checked on a host copy; the host arena's in place.
  void check_guard() {
    std::byte guard[kArenaGuardBytes];
    CUDA_CHECK(cudaMemcpy(guard, mem_->device + p_.plan.device_arena_bytes, kArenaGuardBytes,
                          cudaMemcpyDeviceToHost));
    arena_check_guard(guard, p_.plan.device_arena_bytes, "device");
    if (mem_->host)
      arena_check_guard(mem_->host + p_.plan.host_arena_bytes, p_.plan.host_arena_bytes, "host");
  }

  // Teardown ignores errors: it also runs after a failure.
  void release(bool abort) {
    // A host worker left inside a host op (a collective whose peers stopped)
    // may still write the host arena: it stays allocated until the job ends.
    if (!gpu_executor_stop(exec_)) {
      host_arena_leaked_ = true;
      std::fprintf(stderr,
                   "rank %lld: note: the host worker is still inside an op run on the host (a "
                   "collective other ranks may never join); the job's abort will end it\n",
                   static_cast<long long>(c_ ? c_->comms.rank : 0));
    }
    if (comms_created_) gpu_comm_destroy(gc_.comms, abort);
    comms_created_ = false;
    gpu_attention_destroy(gc_.exec.attention);
    gc_.exec.attention = nullptr;
    if (gc_.exec.gemms) gpu_gemm_cache_destroy(gc_.exec.gemms);
    if (gc_.exec.lt) cublasLtDestroy(gc_.exec.lt);
    gc_.exec.gemms = nullptr;
    gc_.exec.lt = nullptr;
    if (gc_.host_inputs) cudaFreeHost(gc_.host_inputs);
    if (gc_.host_scalars) cudaFreeHost(gc_.host_scalars);
    gc_.host_inputs = nullptr;
    gc_.host_scalars = nullptr;
    if (eval_losses_) cudaFreeHost(eval_losses_);
    eval_losses_ = nullptr;
    gpu_muon_tables_destroy(muon_tables_);
    gc_.muon_units = nullptr;
    if (small_) cudaFree(small_);
    small_ = nullptr;
    if (mem_ && mem_->device) cudaFree(mem_->device);
    if (mem_ && mem_->host && !host_arena_leaked_) cudaFreeHost(mem_->host);
    if (mem_) mem_->device = mem_->host = nullptr;
  }

  const program& p_;
  step_context* c_ = nullptr;
  arena* mem_ = nullptr;
  gpu_context gc_;
  gpu_executor exec_;
  int64_t runs_ = 0;  // steps run by this process
  gpu_comm_mode mode_ = gpu_comm_mode::nccl;
  bool comms_created_ = false, graphs_ = false;
  int64_t profile_step_ = -1;
  bool host_norm_ = false;          // offload: the gradient norm is computed on the host
  bool host_arena_leaked_ = false;  // see release
  int device_ = 0;
  std::string device_name_;
  attention_choice attention_;
  int64_t arena_used_bytes_ = 0, host_arena_growth_ = 0, tokens_per_mb_ = 0;
  void* small_ = nullptr;
  float* eval_losses_ = nullptr;  // pinned (B*T): an evaluation pass's per-position losses
  gpu_muon_tables muon_tables_;
};

}  // namespace

std::unique_ptr<backend> make_cuda_backend(const program& p) {
  return std::make_unique<cuda_backend>(p);
}

int cuda_train_main(const program& p, int argc, char** argv) {
  return train_main(p, argc, argv, kCudaBackend);
}
