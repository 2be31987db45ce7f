// stop_signal: the handlers of the signals that ask a run to stop
// (runtime/train/stop_signal.h).
#include "runtime/train/stop_signal.h"

#include <signal.h>
#include <atomic>

namespace {

std::atomic<int> g_stop_signal{0};  // the first stop signal to arrive; 0 before any

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

bool stop_signal_received() {
  return g_stop_signal.load() != 0;
}

const char* stop_signal_name() {
  switch (g_stop_signal.load()) {
    case SIGUSR1:
      return "SIGUSR1";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT (Ctrl-C)";
    default:
      return "";
  }
}
