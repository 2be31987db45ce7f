// training_validation: when a run validates, how much of the validation data
// it reads, and the validation pass's mean loss over every rank.
#pragma once

#include <cstdint>

#include "runtime/backend.h"
#include "runtime/program.h"
#include "runtime/train/data.h"
#include "runtime/train/run_log.h"

struct training_validation {
  int64_t every = 0;      // 0: no validation
  int64_t sequences = 0;  // the run's, or all the validation data holds where that is fewer
  val_record last;        // the last validation's

  // After `steps_done` of `steps` steps: every `every` steps, at checkpoints
  // (`checkpoint_due`: one was due after the last step) and at the end; not
  // when the run stops.
  bool due(int64_t steps_done, int64_t steps, bool stop, bool checkpoint_due) const;
  // Collective: the mean per-token loss over val's first `sequences`
  // sequences, by the plan's validation pass (rank `rank`'s share of them),
  // as `last`.
  val_record validate(const program& p, int64_t rank, backend& b, dataloader& val,
                      int64_t steps_done);
};
