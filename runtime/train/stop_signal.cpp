// stop_signal: the handlers of the signals that ask a run to stop
// (runtime/train/stop_signal.h).
#include "runtime/train/stop_signal.h"

#include <signal.h>
#include <atomic>

#include <fmt/format.h>

namespace {

std::atomic<int> g_stop_signal{0};  // the first stop signal to arrive; 0 before any

// Each stop signal the ranks count, in stop_signal.h's order, with its name
// in the stop message.
struct counted_signal {
  int sig;
  const char* name;
};
constexpr counted_signal kCounted[kStopSignals] = {
    {SIGUSR1, "SIGUSR1"}, {SIGTERM, "SIGTERM"}, {SIGINT, "SIGINT (Ctrl-C)"}};

extern "C" void request_stop(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig, std::memory_order_relaxed);
}

void handle(int sig, int flags) {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | flags;
  sigaction(sig, &sa, nullptr);
}

}  // namespace

void stop_signal_install() {
  handle(SIGUSR1, 0);
  handle(SIGTERM, 0);
  handle(SIGINT, SA_RESETHAND);  // Ctrl-C again: the default, ending the process
}

void stop_signal_count(double mine[kStopSignals]) {
  const int arrived = g_stop_signal.load();
  for (int i = 0; i < kStopSignals; ++i)
    mine[i] = kCounted[i].sig == arrived ? 1.0 : 0.0;
}

std::string stop_signal_agreed(const double all[kStopSignals], int world) {
  std::string said;
  for (int i = 0; i < kStopSignals; ++i) {
    const auto ranks = static_cast<int>(all[i]);
    if (ranks <= 0) continue;
    if (!said.empty()) said += " and ";
    said += kCounted[i].name;
    if (ranks < world) said += fmt::format(" ({} of {} ranks had received it)", ranks, world);
  }
  return said;
}
