// executor (CUDA): issuing, capturing and replaying the step, and handing
// host ops to the host worker.
#include "runtime/cuda/executor.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "runtime/cuda/check.cuh"
#include "runtime/cuda/spin.h"
#include "runtime/cuda/step.h"
#include "runtime/trace.h"
#include "runtime/watch_status.h"

namespace {

// How long a host op in progress may take to return when the executor stops
// after a failure with several ranks (it may block in a collective forever).
constexpr std::chrono::milliseconds kHostWorkerGrace(10000);

cudaStream_t stream_of(gpu_executor& e, stream_id s) {
  return e.streams[static_cast<int>(s)];
}

// CUresult's name, for a message ("CUresult 801" where the driver has no name for it).
std::string cu_result_text(CUresult r) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const char* name = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuGetErrorName", &fn, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      fn && found == cudaDriverEntryPointSuccess)
    reinterpret_cast<PFN_cuGetErrorName_v6000>(fn)(r, &name);
  return name ? fmt::format("{} ({})", name, static_cast<int>(r))
              : fmt::format("CUresult {}", static_cast<int>(r));
}

// Stream s writes `value` (op's id as it starts, -1 as it ends) into the
// word of op's stream once its earlier work is done.
void mark(gpu_executor& e, cudaStream_t s, const program_op& op, int32_t value) {
  const CUresult r =
      e.write_value(s, e.marks_device + sizeof(int32_t) * static_cast<size_t>(op.stream),
                    static_cast<cuuint32_t>(value), CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS)
    throw runtime_error(
        fmt::format("cuStreamWriteValue32 (the watchdog's mark of the {} of op #{} {}) failed: {}",
                    value < 0 ? "end" : "start", op.id, op.label, cu_result_text(r)));
}

int32_t read_mark(const gpu_executor& e, int s) {
  return static_cast<const volatile int32_t*>(e.marks)[s];
}

// Why this GPU cannot write the marks ("" when it can): the driver must have
// cuStreamWriteValue32 (CUDA 12's), and a value written eagerly and one
// written from a captured graph (where the step may be) must reach the host.
std::string probe_marks(gpu_executor& e) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &fn, 12000,
                                                           cudaEnableDefault, &found);
  if (err != cudaSuccess || !fn || found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return fmt::format("the driver has no cuStreamWriteValue32 of CUDA 12 ({})",
                       err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found");
  }
  e.write_value = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(fn);
  cudaStream_t s = stream_of(e, stream_id::compute);
  CUresult r = e.write_value(s, e.marks_device, 7, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS) return "cuStreamWriteValue32 failed: " + cu_result_text(r);
  CUDA_CHECK(cudaStreamSynchronize(s));
  if (read_mark(e, 0) != 7) return "a value the GPU wrote did not reach the host";
  if (e.graphs) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    r = e.write_value(s, e.marks_device, 8, CU_STREAM_WRITE_VALUE_DEFAULT);
    const cudaError_t end = cudaStreamEndCapture(s, &g);
    cudaGraphExec_t x = nullptr;
    cudaError_t run = end;
    if (r == CUDA_SUCCESS && end == cudaSuccess) {
      run = cudaGraphInstantiate(&x, g, 0);
      if (run == cudaSuccess) run = cudaGraphLaunch(x, s);
      if (run == cudaSuccess) run = cudaStreamSynchronize(s);
    }
    if (x) cudaGraphExecDestroy(x);
    if (g) cudaGraphDestroy(g);
    if (r != CUDA_SUCCESS || run != cudaSuccess) {
      cudaGetLastError();
      return "cuStreamWriteValue32 cannot be captured in a CUDA graph: " +
             (r != CUDA_SUCCESS ? cu_result_text(r) : std::string(cudaGetErrorString(run)));
    }
    if (read_mark(e, 0) != 8) return "a value the GPU wrote from a graph did not reach the host";
  }
  return "";
}

// The marks (unless FSDPGEN_GPU_MARKS=0), handed to the monitor; where this
// GPU cannot write them, a note and host-side marks only.
void start_marks(gpu_executor& e) {
  const char* env = std::getenv("FSDPGEN_GPU_MARKS");
  if (env && std::strcmp(env, "0") != 0 && std::strcmp(env, "1") != 0)
    throw runtime_error(fmt::format(
        "FSDPGEN_GPU_MARKS={}: expected 0 (the GPU's streams do not mark their ops for the "
        "watchdog) or 1 (they do, the default)",
        env));
  if (env && std::strcmp(env, "0") == 0) return;
  CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&e.marks), kStreamCount * sizeof(int32_t),
                           cudaHostAllocMapped));
  void* device = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(&device, e.marks, 0));
  e.marks_device = reinterpret_cast<CUdeviceptr>(device);
  const std::string why = probe_marks(e);
  for (int s = 0; s < kStreamCount; ++s)
    static_cast<volatile int32_t*>(e.marks)[s] = -1;
  if (why.empty()) {
    watch_attach_gpu_marks(e.marks);
    return;
  }
  cudaFreeHost(e.marks);
  e.marks = nullptr;
  e.marks_device = 0;
  e.write_value = nullptr;
  std::printf(
      "rank %lld: note: watchdog: the GPU's streams cannot mark the ops they run (%s), so the "
      "watchdog sees the host's side only: a GPU op that never ends shows as the host waiting "
      "for the GPU\n",
      static_cast<long long>(e.gpu->comms.rank), why.c_str());
  std::fflush(stdout);
}

// Tells the monitor which step this run is (as the CPU's streams_run_step
// does) and that the GPU's marks from now on are of another run.
void begin_run(const gpu_executor& e) {
  watch_status& w = watch_process_status();
  w.step.store(e.ctx->step, std::memory_order_relaxed);
  w.validation_pass.store(e.ctx->validation_pass, std::memory_order_relaxed);
  w.gpu_run.fetch_add(1, std::memory_order_release);
}

// Issues ops 0 .. op_count-1 of a step in issue order; with timing,
// brackets each op with timing events; with stall, spins before stall_op.
void issue(gpu_executor& e, bool timed, int op_count, bool stall) {
  cudaStream_t compute = stream_of(e, stream_id::compute);
  if (timed) CUDA_CHECK(cudaEventRecord(e.step_zero, compute));
  const bool whole = op_count == e.p->op_count;  // a prefix hands nothing to the host
  if (e.host.state && whole) {
    // The host clock's origin: the moment the GPU passes step_zero (at once:
    // the previous step is over).
    if (timed) CUDA_CHECK(cudaEventSynchronize(e.step_zero));
    host_worker_begin_step(e.host, timed, timed ? trace_clock_ns() : 0);
  }
  cuda_step_begin(*e.gpu, compute);
  CUDA_CHECK(cudaEventRecord(e.step_begin, compute));
  for (int s = 1; s < kStreamCount; ++s)
    if (e.stream_used[s]) CUDA_CHECK(cudaStreamWaitEvent(e.streams[s], e.step_begin, 0));

  for (int i = 0; i < op_count; ++i) {
    const program_op& op = e.p->ops[i];
    if (e.on_host[static_cast<size_t>(i)]) {
      if (!whole) throw std::logic_error("a prefix of the step holds a host op");
      // Every op before it has recorded its event: the worker may wait for them.
      host_worker_hand_over(e.host, i);
      continue;
    }
    cudaStream_t s = stream_of(e, op.stream);
    for (int d = 0; d < op.dep_count; ++d)
      CUDA_CHECK(cudaStreamWaitEvent(s, e.done[static_cast<size_t>(op.deps[d])], 0));
    const bool host_sync = e.host_sync[static_cast<size_t>(i)];
    std::optional<watch_op_scope> on_host;
    if (host_sync) {
      CUDA_CHECK(cudaStreamSynchronize(s));  // its dependencies, waited for unmarked
      on_host.emplace(watch_process_status().streams[static_cast<int>(op.stream)], i,
                      trace_clock_ns());
    } else if (e.marks) {
      mark(e, s, op, i);
    }
    if (stall && i == e.stall_op) cuda_spin(s, watch_process_status().inject_stall_seconds);
    if (timed) CUDA_CHECK(cudaEventRecord(e.start[static_cast<size_t>(i)], s));
    e.gpu->exec.stream = s;
    op.run(*e.ctx);
    if (timed) CUDA_CHECK(cudaEventRecord(e.end[static_cast<size_t>(i)], s));
    if (!host_sync && e.marks) mark(e, s, op, -1);
    CUDA_CHECK(cudaEventRecord(e.done[static_cast<size_t>(i)], s));
  }

  for (int s = 1; s < kStreamCount; ++s)
    if (e.stream_used[s]) {
      CUDA_CHECK(cudaEventRecord(e.joined[s], e.streams[s]));
      CUDA_CHECK(cudaStreamWaitEvent(compute, e.joined[s], 0));
    }
  cuda_step_end(*e.gpu, compute);
}

int64_t elapsed_ns(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, from, to));
  return std::llround(static_cast<double>(ms) * 1e6);
}

}  // namespace

void gpu_executor_start(gpu_executor& e, const program& p, step_context& ctx, gpu_context& gc,
                        bool use_graphs) {
  e.p = &p;
  e.ctx = &ctx;
  e.gpu = &gc;
  e.on_host = host_worker_ops(p);
  e.graphs = use_graphs;
  e.stream_used[0] = true;
  for (int i = 0; i < p.op_count; ++i)
    if (!e.on_host[static_cast<size_t>(i)]) e.stream_used[static_cast<int>(p.ops[i].stream)] = true;
  // Collectives get a higher priority than compute, so that a ready
  // all-gather is not queued behind a long run of GEMMs.
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (int s = 0; s < kStreamCount; ++s)
    if (e.stream_used[s])
      CUDA_CHECK(cudaStreamCreateWithPriority(&e.streams[s], cudaStreamNonBlocking,
                                              s == 0 ? least : greatest));
  const size_t n = static_cast<size_t>(p.op_count);
  e.done.resize(n);
  e.start.resize(n);
  e.end.resize(n);
  for (size_t i = 0; i < n; ++i) {
    CUDA_CHECK(cudaEventCreateWithFlags(&e.done[i], cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&e.start[i]));
    CUDA_CHECK(cudaEventCreate(&e.end[i]));
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&e.step_begin, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreate(&e.step_zero));
  for (int s = 1; s < kStreamCount; ++s)
    if (e.stream_used[s])
      CUDA_CHECK(cudaEventCreateWithFlags(&e.joined[s], cudaEventDisableTiming));
  e.start_ns.assign(n, 0);
  e.end_ns.assign(n, 0);
  e.host_sync.assign(n, 0);
  for (int i = 0; i < p.op_count; ++i) {
    const auto k = static_cast<size_t>(i);
    if (e.on_host[k]) continue;
    e.host_sync[k] = gc.comms.mode == gpu_comm_mode::mpi_test && p.ops[i].group != comm_group::none;
    if (e.stall_op < 0 && p.ops[i].stream == stream_id::compute) e.stall_op = i;
  }
  start_marks(e);
  if (p.host_op_count > 0) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    host_worker_start(e.host, p, ctx, e.on_host, e.done, device);
  }
}

namespace {

void run_step(gpu_executor& e, int64_t step, bool timed) {
  cudaStream_t compute = stream_of(e, stream_id::compute);
  begin_run(e);
  // --inject-stall's step: issued eagerly, so that its spin kernel is in it.
  const bool stall = e.ctx->validation_pass < 0 &&
                     e.ctx->step == watch_process_status().inject_stall_step && e.stall_op >= 0;
  if (e.graph && !timed && !stall) {
    CUDA_CHECK(cudaGraphLaunch(e.graph, compute));
  } else if (e.graphs && !timed && !stall && step >= 1 && !e.graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal));
    try {
      issue(e, false, e.p->op_count, false);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(compute, &partial);  // leave the stream usable for the error path
      if (partial) cudaGraphDestroy(partial);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(compute, &g));
    CUDA_CHECK(cudaGraphInstantiate(&e.graph, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaGraphLaunch(e.graph, compute));
  } else {
    issue(e, timed, e.p->op_count, stall);
  }
  CUDA_CHECK(cudaStreamSynchronize(compute));
  if (e.host.state) host_worker_finish_step(e.host, e.start_ns, e.end_ns);
  if (timed)
    for (int i = 0; i < e.p->op_count; ++i) {
      if (e.on_host[static_cast<size_t>(i)]) continue;  // timed by the host worker
      e.start_ns[static_cast<size_t>(i)] = elapsed_ns(e.step_zero, e.start[static_cast<size_t>(i)]);
      e.end_ns[static_cast<size_t>(i)] = elapsed_ns(e.step_zero, e.end[static_cast<size_t>(i)]);
    }
}

}  // namespace

// After a failure the GPU may never write the end of an op it began: the
// monitor stops reading the marks, lest it report that op as stalled while
// the error ends the run.
void gpu_executor_run_step(gpu_executor& e, int64_t step, bool timed) {
  try {
    run_step(e, step, timed);
  } catch (...) {
    watch_attach_gpu_marks(nullptr);
    throw;
  }
}

void gpu_executor_run_prefix(gpu_executor& e, int op_count) {
  try {
    begin_run(e);
    issue(e, false, op_count, false);
    CUDA_CHECK(cudaStreamSynchronize(stream_of(e, stream_id::compute)));
  } catch (...) {
    watch_attach_gpu_marks(nullptr);
    throw;
  }
}

bool gpu_executor_stop(gpu_executor& e) {
  if (e.marks) watch_attach_gpu_marks(nullptr);
  // The host worker first (it may be waiting for the events freed below). A
  // single rank's host op cannot block in a collective: it gets all the time
  // it needs.
  const bool stopped = host_worker_stop(
      e.host, e.p && e.p->parallel.world > 1 ? kHostWorkerGrace : std::chrono::milliseconds(-1));
  // Teardown: errors are ignored (an earlier failure may have left the device unusable).
  if (e.graph) cudaGraphExecDestroy(e.graph);
  e.graph = nullptr;
  for (cudaEvent_t ev : e.done)
    cudaEventDestroy(ev);
  for (cudaEvent_t ev : e.start)
    cudaEventDestroy(ev);
  for (cudaEvent_t ev : e.end)
    cudaEventDestroy(ev);
  e.done.clear();
  e.start.clear();
  e.end.clear();
  if (e.step_begin) cudaEventDestroy(e.step_begin);
  if (e.step_zero) cudaEventDestroy(e.step_zero);
  e.step_begin = e.step_zero = nullptr;
  // After a failure a stream may still have work that never ends (a
  // collective whose peer stopped, until the communicators are aborted) and
  // marks to write: freeing the marks then would wait for it, so they stay
  // (a few bytes, until the process ends).
  bool idle = true;
  for (int s = 0; s < kStreamCount; ++s)
    if (e.streams[s] && cudaStreamQuery(e.streams[s]) == cudaErrorNotReady) idle = false;
  for (int s = 0; s < kStreamCount; ++s) {
    if (e.joined[s]) cudaEventDestroy(e.joined[s]);
    if (e.streams[s]) cudaStreamDestroy(e.streams[s]);
    e.joined[s] = nullptr;
    e.streams[s] = nullptr;
  }
  if (e.marks && idle) cudaFreeHost(e.marks);
  e.marks = nullptr;
  e.marks_device = 0;
  return stopped;
}
