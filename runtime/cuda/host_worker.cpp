// host_worker (CUDA): which ops run on the host, the host thread, its
// hand-over queue and its waits.
#include "runtime/cuda/host_worker.h"

#include <fmt/format.h>
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>

#include "runtime/check.h"
#include "runtime/cuda/check.cuh"
#include "runtime/poll.h"
#include "runtime/trace.h"
#include "runtime/watch_status.h"

struct host_worker_state {
  const program* p = nullptr;
  step_context* ctx = nullptr;
  std::vector<char> on_host;      // per op
  std::vector<cudaEvent_t> done;  // per op (the executor's handles)
  int device = 0;
  std::vector<int> queue;  // ring of host_op_count op ids, in issue order
  // Per op, this step's times when timed: the worker's own, so that a worker
  // left running after a failure writes nothing that its caller frees.
  std::vector<int64_t> start_ns, end_ns;

  std::mutex m;  // guards everything below
  std::condition_variable cv;
  int64_t handed = 0, ran = 0;  // ops handed over and run since the start
  bool timed = false;
  int64_t origin_ns = 0;
  std::atomic<bool> stop{false};
  bool failed = false, exited = false;
  std::exception_ptr error;
};

namespace {

struct stopped {};  // a stop request ended a wait: unwind quietly

// Waits for a GPU op's event: a short spin, then sleeps with a growing
// back-off (a few microseconds at first, at most 100), checking for a stop
// request between polls.
void wait_for_gpu(const host_worker_state& s, cudaEvent_t event) {
  poll_until(
      [&] {
        const cudaError_t r = cudaEventQuery(event);
        if (r == cudaSuccess) return true;
        if (r != cudaErrorNotReady) CUDA_CHECK(r);
        if (s.stop.load(std::memory_order_relaxed)) throw stopped{};
        return false;
      },
      64, std::chrono::microseconds(2));
}

void run_op(host_worker_state& s, int id, bool timed, int64_t origin_ns) {
  const program_op& op = s.p->ops[id];
  for (int d = 0; d < op.dep_count; ++d)
    if (!s.on_host[static_cast<size_t>(op.deps[d])])
      wait_for_gpu(s, s.done[static_cast<size_t>(op.deps[d])]);
  // The watchdog's mark, as a CPU stream's: the op, once its dependencies are done.
  const int64_t start = trace_clock_ns();
  const watch_op_scope running(watch_process_status().streams[static_cast<int>(op.stream)], id,
                               start);
  if (timed) s.start_ns[static_cast<size_t>(id)] = start - origin_ns;
  op.run(*s.ctx);
  if (timed) s.end_ns[static_cast<size_t>(id)] = trace_clock_ns() - origin_ns;
}

void work(const std::shared_ptr<host_worker_state>& state) {
  host_worker_state& s = *state;
  prctl(PR_SET_TIMERSLACK, 1000UL);  // short sleeps in wait_for_gpu stay short
  try {
    CUDA_CHECK(cudaSetDevice(s.device));
    for (;;) {
      int id = 0;
      bool timed = false;
      int64_t origin_ns = 0;
      {
        std::unique_lock<std::mutex> lock(s.m);
        s.cv.wait(lock, [&] { return s.stop.load() || s.ran < s.handed; });
        if (s.stop.load()) break;
        id = s.queue[static_cast<size_t>(s.ran % static_cast<int64_t>(s.queue.size()))];
        timed = s.timed;
        origin_ns = s.origin_ns;
      }
      run_op(s, id, timed, origin_ns);
      {
        std::lock_guard<std::mutex> lock(s.m);
        ++s.ran;
      }
      s.cv.notify_all();
    }
  } catch (const stopped&) {
  } catch (...) {
    std::lock_guard<std::mutex> lock(s.m);
    s.error = std::current_exception();
    s.failed = true;
  }
  {
    std::lock_guard<std::mutex> lock(s.m);
    s.exited = true;
  }
  s.cv.notify_all();
}

}  // namespace

std::vector<char> host_worker_ops(const program& p) {
  std::vector<char> on_host(static_cast<size_t>(p.op_count), 0);
  for (int i = 0; i < p.host_op_count; ++i) {
    const int id = p.host_ops[i];
    if (id < 0 || id >= p.op_count || (i > 0 && id <= p.host_ops[i - 1]))
      throw runtime_error(fmt::format(
          "internal error: the program's host ops are not op ids in issue order (entry {}: {})", i,
          id));
    on_host[static_cast<size_t>(id)] = 1;
  }
  bool host_comm[kStreamCount][4] = {}, gpu_comm[kStreamCount][4] = {};
  for (int i = 0; i < p.op_count; ++i) {
    const program_op& op = p.ops[i];
    const bool host = on_host[static_cast<size_t>(i)];
    (host ? host_comm : gpu_comm)[static_cast<int>(op.stream)][static_cast<int>(op.group)] = true;
    for (int d = 0; d < op.dep_count; ++d) {
      const int dep = op.deps[d];
      if (host && (dep < 0 || dep >= i))
        throw runtime_error(fmt::format(
            "internal error: {} (op #{}) runs on the host but depends on op #{}, which is not "
            "issued before it",
            op.label, i, dep));
      if (!host && dep >= 0 && dep < p.op_count && on_host[static_cast<size_t>(dep)])
        throw runtime_error(fmt::format(
            "internal error: {} (op #{}) runs on the GPU but depends on {} (op #{}), which runs on "
            "the host: with offload the GPU must never wait for the host within a step",
            op.label, i, p.ops[dep].label, dep));
    }
  }
  for (int s = 0; s < kStreamCount; ++s)
    for (int g = 1; g < 4; ++g)
      if (host_comm[s][g] && gpu_comm[s][g])
        throw runtime_error(
            fmt::format("internal error: ops on the host and on the GPU share the communicator of "
                        "stream {} and group {}",
                        s, g));
  return on_host;
}

void host_worker_start(host_worker& w, const program& p, step_context& ctx,
                       const std::vector<char>& on_host, const std::vector<cudaEvent_t>& done,
                       int device) {
  auto s = std::make_shared<host_worker_state>();
  s->p = &p;
  s->ctx = &ctx;
  s->on_host = on_host;
  s->done = done;
  s->device = device;
  s->queue.assign(static_cast<size_t>(std::max(p.host_op_count, 1)), -1);
  s->start_ns.assign(static_cast<size_t>(p.op_count), 0);
  s->end_ns.assign(static_cast<size_t>(p.op_count), 0);
  w.thread = std::thread(work, s);
  w.state = std::move(s);
}

void host_worker_begin_step(host_worker& w, bool timed, int64_t origin_ns) {
  host_worker_state& s = *w.state;
  std::lock_guard<std::mutex> lock(s.m);
  s.timed = timed;
  s.origin_ns = origin_ns;
}

void host_worker_hand_over(host_worker& w, int id) {
  host_worker_state& s = *w.state;
  {
    std::lock_guard<std::mutex> lock(s.m);
    if (s.handed - s.ran >= static_cast<int64_t>(s.queue.size()))
      throw std::logic_error("internal error: more host ops handed over in a step than " +
                             std::to_string(s.queue.size()) + " (program::host_op_count)");
    s.queue[static_cast<size_t>(s.handed % static_cast<int64_t>(s.queue.size()))] = id;
    ++s.handed;
  }
  s.cv.notify_all();
}

void host_worker_finish_step(host_worker& w, std::vector<int64_t>& start_ns,
                             std::vector<int64_t>& end_ns) {
  host_worker_state& s = *w.state;
  std::unique_lock<std::mutex> lock(s.m);
  s.cv.wait(lock, [&] { return s.failed || s.exited || s.ran == s.handed; });
  if (s.failed) std::rethrow_exception(s.error);
  if (s.ran != s.handed)
    throw std::logic_error("internal error: the host worker stopped in the middle of a step");
  if (!s.timed) return;
  for (int i = 0; i < s.p->host_op_count; ++i) {
    const auto id = static_cast<size_t>(s.p->host_ops[i]);
    start_ns[id] = s.start_ns[id];
    end_ns[id] = s.end_ns[id];
  }
}

bool host_worker_stop(host_worker& w, std::chrono::milliseconds grace) {
  if (!w.state) return true;
  host_worker_state& s = *w.state;
  bool exited = false;
  {
    std::unique_lock<std::mutex> lock(s.m);
    s.stop = true;
    s.cv.notify_all();
    auto gone = [&] { return s.exited; };
    if (grace.count() < 0)
      s.cv.wait(lock, gone);
    else
      s.cv.wait_for(lock, grace, gone);
    exited = s.exited;
  }
  if (exited)
    w.thread.join();
  else
    w.thread.detach();  // it keeps its own reference to the state
  w.state.reset();
  return exited;
}
