// poll: waiting for work another agent completes (an MPI request, a CUDA
// event) without holding a core: `spins` checks back to back, then a sleep
// before each further check, from `first` doubling up to 100 us.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

// Returns once ready() is true (ready may throw to give up).
template <class Ready>
void poll_until(Ready ready, int spins, std::chrono::microseconds first) {
  for (int i = 0; i < spins; ++i)
    if (ready()) return;
  for (auto pause = first;; pause = std::min(pause * 2, std::chrono::microseconds(100))) {
    std::this_thread::sleep_for(pause);
    if (ready()) return;
  }
}
