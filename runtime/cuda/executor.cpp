// executor (CUDA): issuing, capturing and replaying the step, and handing
// host ops to the host worker.
#include "runtime/cuda/executor.h"

#include <chrono>
#include <cmath>
#include <stdexcept>

#include "runtime/cuda/check.cuh"
#include "runtime/cuda/step.h"
#include "runtime/trace.h"

namespace {

// How long a host op in progress may take to return when the executor stops
// after a failure with several ranks (it may block in a collective forever).
constexpr std::chrono::milliseconds kHostWorkerGrace(10000);

cudaStream_t stream_of(gpu_executor& e, stream_id s) {
  return e.streams[static_cast<int>(s)];
}

// Issues ops 0 .. op_count-1 of a step in issue order; with timing,
// brackets each op with timing events.
void issue(gpu_executor& e, bool timed, int op_count) {
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
    if (timed) CUDA_CHECK(cudaEventRecord(e.start[static_cast<size_t>(i)], s));
    e.gpu->exec.stream = s;
    op.run(*e.ctx);
    if (timed) CUDA_CHECK(cudaEventRecord(e.end[static_cast<size_t>(i)], s));
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
  if (p.host_op_count > 0) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    host_worker_start(e.host, p, ctx, e.on_host, e.done, device);
  }
}

void gpu_executor_run_step(gpu_executor& e, int64_t step, bool timed) {
  cudaStream_t compute = stream_of(e, stream_id::compute);
  if (e.graph && !timed) {
    CUDA_CHECK(cudaGraphLaunch(e.graph, compute));
  } else if (e.graphs && !timed && step >= 1 && !e.graph) {
    cudaGraph_t g = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(compute, cudaStreamCaptureModeThreadLocal));
    try {
      issue(e, false, e.p->op_count);
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
    issue(e, timed, e.p->op_count);
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

void gpu_executor_run_prefix(gpu_executor& e, int op_count) {
  issue(e, false, op_count);
  CUDA_CHECK(cudaStreamSynchronize(stream_of(e, stream_id::compute)));
}

bool gpu_executor_stop(gpu_executor& e) {
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
  for (int s = 0; s < kStreamCount; ++s) {
    if (e.joined[s]) cudaEventDestroy(e.joined[s]);
    if (e.streams[s]) cudaStreamDestroy(e.streams[s]);
    e.joined[s] = nullptr;
    e.streams[s] = nullptr;
  }
  return stopped;
}
