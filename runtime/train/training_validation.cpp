// training_validation: when a run validates, and the validation pass's mean
// loss over every rank (runtime/train/training_validation.h).
#include "runtime/train/training_validation.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>

#include "runtime/check.h"
#include "runtime/comm.h"

bool training_validation::due(int64_t steps_done, int64_t steps, bool stop,
                              bool checkpoint_due) const {
  // A run asked to stop writes its checkpoint and leaves at once: a preempted
  // job has seconds.
  return every > 0 && !stop && (steps_done % every == 0 || steps_done == steps || checkpoint_due);
}

val_record training_validation::validate(const program& p, int64_t rank, backend& b,
                                         dataloader& val, int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t B = p.parallel.micro_batch, world = p.parallel.world;
  const int64_t passes = (sequences + world * B - 1) / (world * B);
  double mine = 0;
  for (int64_t pass = 0; pass < passes; ++pass) {
    const int64_t first = (pass * world + rank) * B;
    mine += b.run_validation(pass, std::clamp<int64_t>(sequences - first, 0, B));
  }
  agree_on_error(dataloader_take_error(val), "reading the validation data");
  double all = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  last = {steps_done, all / static_cast<double>(sequences * p.model.context), sequences,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  return last;
}
