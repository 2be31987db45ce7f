// training_validation: when a run validates, the validation pass's mean
// loss over every rank, and the warning when the validation data is trained
// on (runtime/train/training_run.h).
#include "runtime/train/training_run.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "runtime/check.h"
#include "runtime/comm.h"

// A validation file that is also a training file is not held out: said once.
void training_run::warn_if_val_is_trained_on() const {
  if (!lead_) return;
  for (const mapped_file& v : val_.files)
    for (const mapped_file& t : data_.files) {
      std::error_code ec;
      if (!std::filesystem::equivalent(v.path, t.path, ec)) continue;
      std::printf(
          "warning: val: %s is also a training file: validation reads sequences the run trains "
          "on, so its loss is not a held-out loss\n",
          v.path.c_str());
      break;
    }
}

bool training_run::validation_due(int64_t steps_done) const {
  // A run asked to stop writes its checkpoint and leaves at once: a preempted
  // job has seconds.
  return val_every_ > 0 && !stop_ &&
         (steps_done % val_every_ == 0 || steps_done == steps_ || checkpoint_due(steps_done - 1));
}

val_record training_run::validate(int64_t steps_done) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t B = p_.parallel.micro_batch, world = p_.parallel.world;
  const int64_t passes = (val_sequences_ + world * B - 1) / (world * B);
  double mine = 0;
  for (int64_t pass = 0; pass < passes; ++pass) {
    const int64_t first = (pass * world + li_.rank) * B;
    mine += b_->run_validation(pass, std::clamp<int64_t>(val_sequences_ - first, 0, B));
  }
  agree_on_error(dataloader_take_error(val_), "reading the validation data");
  double all = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  last_val_ = {steps_done, all / static_cast<double>(val_sequences_ * p_.model.context),
               val_sequences_,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
  totals_.validated = true;
  totals_.last_val_loss = last_val_.loss;
  totals_.last_val_step = steps_done;
  return last_val_;
}

void training_run::validate_untrained() {
  if (val_every_ <= 0 || totals_.steps_run > 0 || stop_) return;
  const val_record v = validate(start_step_);
  if (lead_) run_log_val(v, steps_);
}
