// training_eval: multiple-choice evaluation in the loop (runtime/train/eval.h):
// llm.c's HellaSwag-format file scored on the planned forward, its examples
// split over the ranks, every candidate's loss sum agreed by all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/files/eval_file.h"
#include "runtime/train/run_log.h"
#include "runtime/train/run_shape.h"

struct training_eval {
  // Collective: the file --eval (or the spec's eval) names, read and checked
  // on every rank; how often and how much of it is scored.
  void open(const run_shape& s);
  // After `steps_done` of `steps` steps: every `every` steps, at checkpoints
  // (`checkpoint_due`: one was due after the last step) and at the end; not
  // when the run stops.
  bool due(int64_t steps_done, int64_t steps, bool stop, bool checkpoint_due) const;
  // Collective: acc and acc_norm over the file's first `examples` examples,
  // by the plan's validation pass; rank 0 writes --eval-scores.
  eval_record evaluate(const run_shape& s, backend& b, int64_t steps_done) const;

  eval_file file;        // no examples: none
  int64_t examples = 0;  // scored each time
  int64_t every = 0;     // 0: never

 private:
  void write_scores(const std::string& path, const std::vector<double>& loss_sums) const;
};
