// host_worker (CUDA): the ops a GPU program runs on the host when it offloads
// (program::host_ops: the gradient norm, the optimizer and the collectives of
// host memory, written in the CPU vocabulary), run by one host thread in issue
// order. The issuing thread hands each op over at its place in the issue
// order, after it has recorded the CUDA events of every op before it; the
// worker waits for the events of the op's dependencies that run on the GPU
// (polling cudaEventQuery, so that a stop request is seen even when the GPU
// never gets there), then runs it. Its dependencies that run on the host ran
// before it on this thread. No GPU op depends on a host op within a step
// (gpu_executor_start checks), so the issuing thread never waits for the
// worker and keeps feeding the GPU; a step ends when both are done. While it
// runs an op, the watchdog's slot of the op's stream names it
// (runtime/watch_status.h), as a CPU stream's would.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/program.h"

struct step_context;
struct host_worker_state;  // host_worker.cpp; shared by the handle and the thread

// Per op of p, whether it runs on the host (p.host_ops). Throws
// runtime_error when what the worker relies on does not hold (codegen/planner/Verify
// checks the same of every plan): the host ops are op ids in issue order,
// each issued after its dependencies; no op on the GPU depends on one, so the
// GPU never waits for the host within a step; and no (stream, group)
// communicator serves both (in the MPI test mode both would use one MPI
// communicator from two threads, in no agreed order).
std::vector<char> host_worker_ops(const program& p);

struct host_worker {
  std::shared_ptr<host_worker_state> state;  // null: not started (no host ops)
  std::thread thread;
};

// Starts the thread, which makes `device` current. on_host: per op, whether
// it runs on the host; done: per op, the event the issuing thread records
// after a GPU op (both outlive the worker, unless host_worker_stop leaves it).
void host_worker_start(host_worker& w, const program& p, step_context& ctx,
                       const std::vector<char>& on_host, const std::vector<cudaEvent_t>& done,
                       int device);
// Before the step's first hand-over: with timed, the worker measures each op
// it runs on the host clock (steady_clock, ns) from origin_ns.
void host_worker_begin_step(host_worker& w, bool timed, int64_t origin_ns);
// Hands op `id` over; called by the issuing thread, in issue order.
void host_worker_hand_over(host_worker& w, int id);
// Waits until the worker ran every op handed over, then (for a timed step)
// writes their times into start_ns and end_ns (per op). Rethrows the worker's
// failure, if it had one.
void host_worker_finish_step(host_worker& w, std::vector<int64_t>& start_ns,
                             std::vector<int64_t>& end_ns);
// Stops the worker, waiting for the op it runs to return; a negative grace
// waits as long as that takes. Returns false when the op did not return within
// the grace: after a failure it can block in a collective whose peers never
// come. The thread is then left running (detached, owning its own state) and
// the host memory its op uses must stay allocated: the caller leaks it, and
// the job ends when the failure reaches MPI_Abort.
bool host_worker_stop(host_worker& w, std::chrono::milliseconds grace);
