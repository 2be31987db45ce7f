// HostWorkerCheck (cuda, no GPU needed): the offload host worker
// (runtime/cuda/host_worker.h) on made-up programs. It is linked without the
// CUDA runtime: the four calls the worker makes (cudaSetDevice,
// cudaEventQuery and the error names) are stubbed below, and an "event" is a
// flag the test sets when its GPU op would have finished. Checks that host
// ops run in issue order, each only after its GPU dependencies; that a
// failure reaches the issuing thread; that stopping ends a wait for the GPU
// and leaves a stuck op running instead of waiting for it; timing; the
// watchdog's marks; and the start-up checks of a program's host ops.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cpu/step.h"
#include "runtime/cuda/host_worker.h"
#include "runtime/watch_status.h"

// A stub event: done once the test says its GPU op finished.
struct CUevent_st {
  std::atomic<bool> done{false};
};

extern "C" {
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t event) {
  return event->done.load() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t CUDARTAPI cudaSetDevice(int) {
  return cudaSuccess;
}
const char* CUDARTAPI cudaGetErrorName(cudaError_t) {
  return "cudaErrorStub";
}
const char* CUDARTAPI cudaGetErrorString(cudaError_t) {
  return "stubbed CUDA runtime";
}
}

namespace {

using namespace std::chrono_literals;

// What the ops did, in order.
std::mutex g_mutex;
std::vector<int> g_ran;
std::atomic<bool> g_release{false}, g_blocked{false}, g_finished{false};

std::vector<int> ran() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_ran;
}

template <int I>
void record(step_context&) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ran.push_back(I);
}
void sleep_2ms(step_context&) {
  std::this_thread::sleep_for(2ms);
}
void fail(step_context&) {
  throw std::runtime_error("the host op failed");
}
// Like a collective whose peers never come, until the test releases it.
void block(step_context&) {
  g_blocked = true;
  while (!g_release)
    std::this_thread::sleep_for(1ms);
  g_finished = true;
}

void (*const kRecord[])(step_context&) = {record<0>, record<1>, record<2>, record<3>, record<4>};

struct op_spec {
  stream_id stream;
  std::vector<int> deps;
  comm_group group = comm_group::none;
};

// A program of ops (each recording its id when run) whose host_ops are `host`.
struct fake_program {
  explicit fake_program(std::vector<op_spec> specs, std::vector<int> host_ops)
      : specs_(std::move(specs)), host_(std::move(host_ops)) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      program_op op{};
      op.id = static_cast<int>(i);
      op.stream = specs_[i].stream;
      op.kind = op_kind::optimizer_step;
      op.label = "OP";
      op.group = specs_[i].group;
      op.deps = specs_[i].deps.data();
      op.dep_count = static_cast<int>(specs_[i].deps.size());
      op.run = kRecord[i];
      ops.push_back(op);
    }
    p.parallel.world = 1;
    p.ops = ops.data();
    p.op_count = static_cast<int>(ops.size());
    p.host_ops = host_.data();
    p.host_op_count = static_cast<int>(host_.size());
    for (size_t i = 0; i < ops.size(); ++i)
      events.push_back(new CUevent_st);
  }
  ~fake_program() {
    for (cudaEvent_t e : events)
      delete e;
  }
  fake_program(const fake_program&) = delete;  // ops and p point into it
  fake_program& operator=(const fake_program&) = delete;
  void finish_gpu_op(int id) { events[static_cast<size_t>(id)]->done = true; }
  void reset_events() {
    for (cudaEvent_t e : events)
      e->done = false;
  }

  std::vector<op_spec> specs_;
  std::vector<int> host_;
  std::vector<program_op> ops;
  std::vector<cudaEvent_t> events;
  program p{};
};

// GPU op 0; host op 1 after it; GPU op 2; host op 3 after 2 and 1; host op 4.
std::unique_ptr<fake_program> offload_like() {
  return std::make_unique<fake_program>(
      std::vector<op_spec>{{stream_id::compute, {}},
                           {stream_id::host, {0}},
                           {stream_id::compute, {}},
                           {stream_id::host, {1, 2}},
                           {stream_id::allreduce, {}, comm_group::shard}},
      std::vector<int>{1, 3, 4});
}

// Each test starts a worker on the program `f` (offload_like, its ops' run
// functions changed as needed); the worker stops before the program goes.
class HostWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_ran.clear();
    g_release = g_blocked = g_finished = false;
  }
  void start() { host_worker_start(w, f->p, ctx, host_worker_ops(f->p), f->events, 0); }
  void TearDown() override {
    g_release = true;
    host_worker_stop(w, std::chrono::milliseconds(-1));
  }

  std::unique_ptr<fake_program> f = offload_like();
  step_context ctx;
  host_worker w;
  std::vector<int64_t> start_ns = std::vector<int64_t>(5, -1), end_ns = std::vector<int64_t>(5, -1);
};

TEST_F(HostWorker, RunsHostOpsInIssueOrderAfterTheirGpuDependencies) {
  start();
  for (int step = 0; step < 3; ++step) {
    f->reset_events();
    host_worker_begin_step(w, false, 0);
    for (int id : {1, 3, 4})
      host_worker_hand_over(w, id);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(ran().size(), 3u * step) << "op 1 must wait for GPU op 0";
    f->finish_gpu_op(2);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(ran().size(), 3u * step) << "op 3 must wait for op 1, before it in issue order";
    f->finish_gpu_op(0);
    host_worker_finish_step(w, start_ns, end_ns);
    std::vector<int> want;
    for (int s = 0; s <= step; ++s)
      want.insert(want.end(), {1, 3, 4});
    EXPECT_EQ(ran(), want);
  }
  EXPECT_EQ(start_ns[1], -1) << "an untimed step writes no times";
}

TEST_F(HostWorker, TimesTheHostOpsOfATimedStep) {
  f->ops[3].run = sleep_2ms;
  start();
  f->finish_gpu_op(0);
  f->finish_gpu_op(2);
  const int64_t origin = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now().time_since_epoch())
                             .count();
  host_worker_begin_step(w, true, origin);
  for (int id : {1, 3, 4})
    host_worker_hand_over(w, id);
  host_worker_finish_step(w, start_ns, end_ns);
  for (int id : {1, 3, 4}) {
    EXPECT_GE(start_ns[static_cast<size_t>(id)], 0) << id;
    EXPECT_GE(end_ns[static_cast<size_t>(id)], start_ns[static_cast<size_t>(id)]) << id;
  }
  EXPECT_GE(end_ns[3] - start_ns[3], 2'000'000);
  EXPECT_GE(start_ns[4], end_ns[3]) << "one thread, in issue order";
  EXPECT_EQ(start_ns[0], -1) << "GPU ops are the executor's to time";
}

TEST_F(HostWorker, AFailureReachesTheIssuingThread) {
  f->ops[3].run = fail;
  start();
  f->finish_gpu_op(0);
  f->finish_gpu_op(2);
  host_worker_begin_step(w, false, 0);
  for (int id : {1, 3, 4})
    host_worker_hand_over(w, id);
  try {
    host_worker_finish_step(w, start_ns, end_ns);
    ADD_FAILURE() << "finish_step should rethrow the host op's failure";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "the host op failed");
  }
  EXPECT_EQ(ran(), std::vector<int>{1}) << "nothing runs after a failure";
  EXPECT_TRUE(host_worker_stop(w, 1000ms));
}

TEST_F(HostWorker, StopEndsAWaitForTheGpu) {
  start();
  host_worker_begin_step(w, false, 0);
  host_worker_hand_over(w, 1);  // GPU op 0 never finishes (a peer died inside a collective)
  std::this_thread::sleep_for(10ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(host_worker_stop(w, 10000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_TRUE(ran().empty());
}

TEST_F(HostWorker, StopLeavesAStuckOpRunning) {
  f->ops[4].run = block;
  start();
  f->finish_gpu_op(0);
  f->finish_gpu_op(2);
  host_worker_begin_step(w, false, 0);
  for (int id : {1, 3, 4})
    host_worker_hand_over(w, id);
  while (!g_blocked)
    std::this_thread::sleep_for(1ms);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(host_worker_stop(w, 50ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(w.state, nullptr);
  g_release = true;  // the detached thread finishes the op on its own state, then exits
  while (!g_finished)
    std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(10ms);
}

// The watchdog (runtime/train/watchdog.h) sees a host op as a CPU stream's: the
// slot of the op's stream names it while it runs, and no op while the worker
// waits for the GPU or after the op.
TEST_F(HostWorker, MarksTheWatchdogSlotOfTheOpsStreamWhileItRuns) {
  f->ops[4].run = block;
  const watch_stream_slot& host = watch_process_status().streams[static_cast<int>(stream_id::host)];
  const watch_stream_slot& allreduce =
      watch_process_status().streams[static_cast<int>(stream_id::allreduce)];
  start();
  host_worker_begin_step(w, false, 0);
  for (int id : {1, 3, 4})
    host_worker_hand_over(w, id);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(host.op.load(), -1) << "op 1 waits for GPU op 0: it does not run yet";
  f->finish_gpu_op(0);
  f->finish_gpu_op(2);
  while (!g_blocked)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(allreduce.op.load(), 4);
  EXPECT_EQ(host.op.load(), -1) << "ops 1 and 3 are done";
  g_release = true;
  host_worker_finish_step(w, start_ns, end_ns);
  EXPECT_EQ(allreduce.op.load(), -1);
}

TEST_F(HostWorker, HandingOverMoreThanAStepsHostOpsIsAnError) {
  start();
  host_worker_begin_step(w, false, 0);
  for (int id : {1, 3, 4})
    host_worker_hand_over(w, id);
  EXPECT_THROW(host_worker_hand_over(w, 1), std::logic_error);
}

std::string ops_error(const fake_program& f) {
  try {
    host_worker_ops(f.p);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(HostWorkerOps, MarksTheProgramsHostOps) {
  EXPECT_EQ(host_worker_ops(offload_like()->p), (std::vector<char>{0, 1, 0, 1, 1}));
  EXPECT_EQ(host_worker_ops(fake_program({{stream_id::compute, {}}}, {}).p), std::vector<char>{0});
}

TEST(HostWorkerOps, RejectWhatTheWorkerCannotRun) {
  // A GPU op waiting for a host op: the GPU would wait for the host.
  EXPECT_NE(ops_error(fake_program({{stream_id::host, {}}, {stream_id::compute, {0}}}, {0}))
                .find("runs on the GPU but depends on"),
            std::string::npos);
  // Host ops out of issue order.
  EXPECT_NE(ops_error(fake_program({{stream_id::host, {}}, {stream_id::host, {}}}, {1, 0}))
                .find("not op ids in issue order"),
            std::string::npos);
  // A host op whose dependency comes after it.
  EXPECT_NE(ops_error(fake_program({{stream_id::host, {1}}, {stream_id::compute, {}}}, {0}))
                .find("which is not issued before it"),
            std::string::npos);
  // One communicator for a host op and a GPU op.
  EXPECT_NE(ops_error(fake_program({{stream_id::allreduce, {}, comm_group::replica},
                                    {stream_id::allreduce, {}, comm_group::replica}},
                                   {1}))
                .find("share the communicator"),
            std::string::npos);
}

}  // namespace
