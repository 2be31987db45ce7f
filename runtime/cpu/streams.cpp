// streams: worker threads, dependency waits and per-op timing.
#include "runtime/cpu/streams.h"

#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <stdexcept>
#include <thread>

#include "runtime/check.h"
#include "runtime/cpu/red_zones.h"
#include "runtime/step_context.h"
#include "runtime/trace.h"

namespace {

struct stopped {};  // another stream failed: unwind quietly

// Waits until `flag` reaches `target`: a short spin, then futex waits, so
// idle streams take no CPU from compute. Failure and shutdown release every
// waiter by raising all flags to kReleased.
constexpr int64_t kReleased = INT64_MAX;

// The futex is the counter's low 32 bits (a futex word is 32 bits; steps and
// ops stay below 2^32, and kReleased's low word differs from theirs). Each
// wait is bounded: a wake-up lost anywhere costs at most kFutexWaitNs, never a
// hang. (std::atomic<int64_t>::wait, used before, cannot be bounded and waits
// on a proxy word of libstdc++'s for 64-bit types; a world-4 run on 2 cores
// once stalled with every stream of one rank waiting, as a lost wake-up would
// leave it. The bound is long enough that idle streams cost no CPU: at 1 ms,
// tiny's step was 2.5% slower.)
static_assert(std::endian::native == std::endian::little, "the futex word is the low half");
constexpr long kFutexWaitNs = 50000000;  // 50 ms: rare enough to cost no CPU

const uint32_t* futex_word(const std::atomic<int64_t>& flag) {
  return reinterpret_cast<const uint32_t*>(&flag);
}

void futex_wait(const std::atomic<int64_t>& flag, int64_t seen) {
  const timespec bound{0, kFutexWaitNs};
  syscall(SYS_futex, futex_word(flag), FUTEX_WAIT_PRIVATE, static_cast<uint32_t>(seen), &bound,
          nullptr, 0);  // returns at once when the word already changed (EAGAIN)
}

void futex_wake_all(std::atomic<int64_t>& flag) {
  syscall(SYS_futex, futex_word(flag), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

void wait_for(const std::atomic<int64_t>& flag, int64_t target, const stream_executor& e) {
  const int64_t v = streams_wait_until(flag, target);
  if (v == kReleased && (e.failed.load() || e.stopping.load())) throw stopped{};
}

void release_all(stream_executor& e) {
  for (int i = 0; i < e.p->op_count; ++i) {
    e.done[i].store(kReleased);
    futex_wake_all(e.done[i]);
  }
  e.go.store(kReleased);
  futex_wake_all(e.go);
}

void fail(stream_executor& e) {
  {
    std::lock_guard<std::mutex> lock(e.error_mutex);
    if (!e.error) e.error = std::current_exception();
    e.failed = true;
  }
  release_all(e);
}

void run_op(stream_executor& e, int stream, int id, int64_t step, bool stall) {
  const program_op& op = e.p->ops[id];
  for (int i = 0; i < op.dep_count; ++i)
    wait_for(e.done[op.deps[i]], step, e);
  const bool red = red_zones_enabled(*e.p);
  if (red) red_zones_arm(*e.p, e.ctx->device, e.ctx->host, id);
  const int64_t start = trace_clock_ns();
  e.start_ns[id] = start - e.step_start_ns;
  watch_stream_slot& slot = e.watch->streams[stream];
  watch_enter(slot, id, start);
  if (stall)
    std::this_thread::sleep_for(std::chrono::duration<double>(e.watch->inject_stall_seconds));
  op.run(*e.ctx);
  watch_leave(slot);
  e.end_ns[id] = trace_clock_ns() - e.step_start_ns;
  if (red) red_zones_check(*e.p, e.ctx->device, e.ctx->host, id);
  // Raise, never lower: a failure may already have released this event.
  int64_t cur = e.done[id].load(std::memory_order_relaxed);
  while (cur < step && !e.done[id].compare_exchange_weak(cur, step, std::memory_order_release)) {
  }
  futex_wake_all(e.done[id]);
}

void run_stream(stream_executor& e, int stream, int64_t step, int limit) {
  bool stall = stream == static_cast<int>(stream_id::compute) && e.stall_first_op;
  for (int id : e.ops_of[stream]) {
    if (id >= limit) break;  // issue order: the rest lie beyond too
    run_op(e, stream, id, step, stall);
    stall = false;
  }
}

// A worker runs run `step` once go has reached it. go may be past it: the
// runs between were finished without this worker, so none had an op of its
// stream (the calling thread waits for every op of a run before the next),
// and it goes straight to go's run. It takes the op count from the same
// word: a count read apart from its run could be the next run's (a
// validation pass's worker, late, once ran the next step's ops with the
// pass's run number and then again with the step's, and its collectives
// no longer matched the other ranks').
void worker(stream_executor& e, int stream) {
  prctl(PR_SET_TIMERSLACK, 1000UL);
  constexpr int64_t kLimitMask = (int64_t{1} << kStreamsLimitBits) - 1;
  for (int64_t step = 0;; ++step) {
    try {
      wait_for(e.go, step << kStreamsLimitBits, e);
      const int64_t go = e.go.load(std::memory_order_acquire);
      step = go >> kStreamsLimitBits;
      run_stream(e, stream, step, static_cast<int>(go & kLimitMask));
    } catch (const stopped&) {
      return;
    } catch (...) {
      fail(e);
      return;
    }
  }
}

}  // namespace

int64_t streams_wait_until(const std::atomic<int64_t>& flag, int64_t target) {
  int64_t v = flag.load(std::memory_order_acquire);
  for (int spin = 0; spin < 2000 && v < target; ++spin)
    v = flag.load(std::memory_order_acquire);
  // Then a few yields (another rank's thread on this core may be the one
  // about to finish), as libstdc++'s atomic wait does before it sleeps.
  for (int yield = 0; yield < 12 && v < target; ++yield) {
    std::this_thread::yield();
    v = flag.load(std::memory_order_acquire);
  }
  while (v < target) {
    futex_wait(flag, v);
    v = flag.load(std::memory_order_acquire);
  }
  return v;
}

void streams_start(stream_executor& e, const program& p, step_context& ctx) {
  prctl(PR_SET_TIMERSLACK, 1000UL);
  e.p = &p;
  e.ctx = &ctx;
  e.watch = &watch_process_status();
  e.done = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(p.op_count));
  // With red zones (--check) every op runs on this thread in issue order, so
  // that a changed zone is the op's that just ran.
  const bool serial = red_zones_enabled(p);
  if (p.op_count >= (1 << kStreamsLimitBits))
    throw std::runtime_error("the program has 2^24 ops or more; the executor counts fewer");
  for (int i = 0; i < p.op_count; ++i) {
    e.done[i] = -1;
    e.ops_of[serial ? static_cast<int>(stream_id::compute) : static_cast<int>(p.ops[i].stream)]
        .push_back(i);
  }
  e.start_ns.assign(static_cast<size_t>(p.op_count), 0);
  e.end_ns.assign(static_cast<size_t>(p.op_count), 0);
  for (int s = 1; s < kStreamCount; ++s)
    if (!e.ops_of[s].empty()) e.workers.emplace_back(worker, std::ref(e), s);
}

void streams_run_step(stream_executor& e, int64_t step, int op_count) {
  const int limit = op_count < 0 ? e.p->op_count : op_count;
  const bool validation = e.ctx->validation_pass >= 0;
  e.watch->step.store(e.ctx->step, std::memory_order_relaxed);
  e.watch->validation_pass.store(e.ctx->validation_pass, std::memory_order_relaxed);
  e.stall_first_op = !validation && e.ctx->step == e.watch->inject_stall_step;
  e.step_start_ns = trace_clock_ns();
  e.go.store(step << kStreamsLimitBits | limit, std::memory_order_release);
  futex_wake_all(e.go);
  try {
    run_stream(e, static_cast<int>(stream_id::compute), step, limit);
    for (int i = 0; i < limit; ++i)
      wait_for(e.done[i], step, e);
  } catch (const stopped&) {
  } catch (...) {
    fail(e);
  }
  if (e.failed) {
    std::lock_guard<std::mutex> lock(e.error_mutex);
    std::rethrow_exception(e.error);
  }
}

void streams_stop(stream_executor& e) {
  e.stopping = true;
  release_all(e);
  for (std::thread& t : e.workers)
    t.join();
  e.workers.clear();
}
