// backend (CPU): the step on this CPU: the arena in host memory, one thread
// per stream (runtime/cpu/streams.h), MPI collectives, guards checked after
// every step.
#include <mpi.h>

#include <omp.h>

#include <cstring>
#include <string>

#include "runtime/backend.h"
#include "runtime/cpu/streams.h"
#include "runtime/machine_memory.h"

namespace {

class cpu_backend final : public backend {
 public:
  // The first thing of a run's set-up (runtime/train/training_run.cpp): its
  // anonymous memory now is where set_up_beside_arena_bytes starts.
  explicit cpu_backend(const program& p)
      : p_(p), created_anonymous_(host_anonymous_bytes_exact()) {}
  // After a failure (an exception unwinding the loop): stop the stream threads.
  ~cpu_backend() override { stop(); }

  void start(step_context& c, arena& mem, const backend_options& o) override {
    c_ = &c;
    // OpenBLAS's workers still spinning from their start would sleep during
    // the reading, each touching a stack page (4 KiB more, about one world-1
    // run in two): let them settle first, for at most a second.
    host_wait_other_threads_idle(1000);
    // Anonymous memory, not the whole resident set: another thread running
    // code it had not run yet faults in file pages, 64 KiB at a time (the
    // kernel's fault-around), and counted 64 KiB more about one run in four
    // with a custom layer (48 KiB once in CI, 2026-11-28).
    const int64_t before = host_anonymous_bytes_exact();
    arena_create(mem, p_, o.arena_extra_bytes);
    arena_growth_ = host_anonymous_bytes_exact() - before;
    c.device = mem.device;
    c.host = mem.host;
    if (p_.plan.workspace_buffer >= 0) {
      const program_buffer& w = p_.buffers[p_.plan.workspace_buffer];
      c.ws = {reinterpret_cast<float*>(c.device + w.offset), w.bytes / 4};
    }
    streams_start(exec_, p_, c);
    mem_ = &mem;  // started: stop() undoes both
  }

  std::string describe() const override {
    const int t = omp_get_max_threads();
    // FSDPGEN_CPU_LEVEL: the CPU code CMake chose (CMakeLists.txt), so that a
    // SIGILL on an older node has its explanation in the log.
    return std::to_string(t) + (t == 1 ? " thread" : " threads") + " per rank, code for " +
           FSDPGEN_CPU_LEVEL;
  }

  void with_host_weights(step_context&, bool, const std::function<void()>& fn) override { fn(); }

  void copy_to_host(step_context& c, int buffer, std::byte* to) override {
    std::memcpy(to, step_buffer<std::byte>(c, buffer),
                static_cast<size_t>(p_.buffers[buffer].bytes));
  }

  step_result run_step(int64_t step, double lr, bool) override {
    if (runs_ == 0) measure_set_up();
    c_->step = step;
    c_->lr = lr;
    c_->loss_sum = 0;
    c_->grad_norm_partial = 0;
    c_->loss_total = 0;
    streams_run_step(exec_, runs_++);  // the executor counts its own steps from 0
    arena_check_guards(*mem_);
    return step_result_of(c_->loss_sum, c_->grad_norm_partial, *c_, c_->loss_total);
  }

  double run_validation(int64_t pass, int64_t rows) override {
    if (runs_ == 0) measure_set_up();
    c_->validation_pass = pass;
    c_->loss_rows = rows;
    c_->loss_sum = 0;
    streams_run_step(exec_, runs_++, static_cast<int>(p_.plan.validation_op_count));
    c_->validation_pass = -1;  // a failure above ends the run: nothing to restore
    arena_check_guards(*mem_);
    return c_->loss_sum;
  }

  void run_eval(const int32_t* inputs, float* losses) override {
    c_->eval_inputs = inputs;
    c_->eval_losses = losses;
    run_validation(0, p_.parallel.micro_batch);
    c_->eval_inputs = nullptr;  // a failure above ends the run: nothing to restore
    c_->eval_losses = nullptr;
  }

  const std::vector<int64_t>& op_start_ns() const override { return exec_.start_ns; }
  const std::vector<int64_t>& op_end_ns() const override { return exec_.end_ns; }
  int64_t warmup_steps() const override { return 0; }
  memory_reading read_memory() const override {
    memory_reading m;
    m.host_resident_bytes = host_resident_bytes();
    m.host_anonymous_bytes = host_anonymous_resident_bytes();
    m.arena_resident_bytes = arenas_resident_bytes();
    m.arena_growth_bytes = arena_growth_;
    m.set_up_beside_arena_bytes = set_up_beside_arena_;
    return m;
  }

  void stop() override {
    if (!mem_) return;  // never started, or stopped
    streams_stop(exec_);
    arena_destroy(*mem_);
    mem_ = nullptr;
  }

 private:
  // The arenas' resident pages (mincore), guards included.
  int64_t arenas_resident_bytes() const {
    int64_t bytes = host_resident_bytes_in(mem_->device, arena_mapped_bytes(mem_->device_bytes));
    if (mem_->host)
      bytes += host_resident_bytes_in(mem_->host, arena_mapped_bytes(mem_->host_bytes));
    return bytes;
  }

  // At the start of the first pass (allocates nothing): what set-up left in
  // the process beside the arenas: communicators, data, threads' stacks and
  // heaps, weights, the run's files.
  void measure_set_up() {
    set_up_beside_arena_ =
        host_anonymous_bytes_exact() - created_anonymous_ - arenas_resident_bytes();
  }

  const program& p_;
  step_context* c_ = nullptr;
  arena* mem_ = nullptr;
  stream_executor exec_;
  int64_t runs_ = 0;               // steps run by this process
  int64_t arena_growth_ = 0;       // memory_reading::arena_growth_bytes
  int64_t created_anonymous_ = 0;  // host_anonymous_bytes_exact() when constructed
  int64_t set_up_beside_arena_ = kNotMeasuredBytes;  // memory_reading::set_up_beside_arena_bytes
};

}  // namespace

std::unique_ptr<backend> make_cpu_backend(const program& p) {
  return std::make_unique<cpu_backend>(p);
}

int train_main(const program& p, int argc, char** argv) {
  return train_main(p, argc, argv, kCpuBackend);
}
