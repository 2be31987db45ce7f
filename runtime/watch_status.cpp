// watch_status: the process's one status, and the GPU's marks attached to it
// (runtime/watch_status.h).
#include "runtime/watch_status.h"

watch_status& watch_process_status() {
  static watch_status status;
  return status;
}

void watch_attach_gpu_marks(const volatile int32_t* marks) {
  watch_status& w = watch_process_status();
  std::lock_guard<std::mutex> lock(w.gpu_marks_mutex);
  w.gpu_marks = marks;
}
