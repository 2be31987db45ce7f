// stop_signal: the handlers of the signals that ask a run to stop
// (runtime/stop_signal.h).
#include "runtime/stop_signal.h"

#include <signal.h>
#include <atomic>

namespace {

std::atomic<int> g_stop_signal{0};

extern "C" void request_stop(int sig) {
  g_stop_signal.store(sig, std::memory_order_relaxed);
}

}  // namespace

void stop_signal_install() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_signal_received() {
  return g_stop_signal.load() != 0;
}
