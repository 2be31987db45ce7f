// training_run: one run of the generated binary, from its checks to its last
// outputs, as the training loop (runtime/train/train.cpp) runs it. The run is
// a plain aggregate of values, each in the file named after it:
//   run_shape             the run's fixed facts (program, flags, launch, steps)
//   training_progress     where it stands: start step, seed, loss scaler, guard, stop
//   training_data         the training and validation data, the step's rows
//   training_validation   when it validates and how much, the last loss
//   training_eval         the multiple-choice evaluation file and its schedule
//   training_samples      rank 0's generator and when it samples
//   training_outputs      log, --metrics, totals, memory, stragglers, trace
//   training_machine      the backend, its arena and step context
//   training_checkpoints  when checkpoints are due and how they are written
// The functions below run what needs several of them: set-up, weights, the
// banner and the end in training_run.cpp; a step, its log and its
// checkpoint in training_step.cpp. Collective ones are called on every
// rank, and each prints what it did on rank 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/launch.h"
#include "runtime/program.h"
#include "runtime/train/run_log.h"
#include "runtime/train/run_shape.h"
#include "runtime/train/train_flags.h"
#include "runtime/train/training_checkpoints.h"
#include "runtime/train/training_data.h"
#include "runtime/train/training_eval.h"
#include "runtime/train/training_machine.h"
#include "runtime/train/training_outputs.h"
#include "runtime/train/training_progress.h"
#include "runtime/train/training_samples.h"
#include "runtime/train/training_validation.h"

struct training_run {
  // `run`: the run as launched (run_settings); `resume_from`: the
  // checkpoint --resume names ("" without --resume), `resumed` its manifest.
  training_run(const program& p, const train_options& o, const checkpoint_run& run,
               std::string resume_from, const checkpoint_manifest& resumed, const launch_info& li);
  training_run(const training_run&) = delete;  // its values point into each other
  training_run& operator=(const training_run&) = delete;

  const run_shape shape;
  training_progress progress;
  training_data data;
  training_validation validation;
  training_eval eval;
  training_samples samples;
  training_outputs outputs;
  // After data, whose rows its step context reads, so that it is destroyed
  // (stopping the backend's threads) first.
  training_machine machine;
  // After machine, whose arena its writer reads, so that the writer is joined first.
  training_checkpoints checkpoints;
};

// Collective: the samples' generator (before the backend, so that set-up's
// memory beside the arena leaves it out), the backend, the data, the
// evaluation file, the communicators and the backend's start.
void training_set_up(training_run& t, const backend_kind& kind);
// From the checkpoint --resume names, --init-from's file, or the seed.
void training_load_weights(training_run& t);
void training_print_banner(const training_run& t);
// Trains 0-based step `step` and agrees with the other ranks on its loss
// and whether to stop after it.
step_record training_step(training_run& t, int64_t step);
// After `steps_done` steps: is a validation, an evaluation, samples due?
bool training_validation_due(const training_run& t, int64_t steps_done);
bool training_eval_due(const training_run& t, int64_t steps_done);
bool training_samples_due(const training_run& t, int64_t steps_done);
// Collective: the validation loss (into the totals), the evaluation, the samples.
val_record training_validate(training_run& t, int64_t steps_done);
eval_record training_evaluate(training_run& t, int64_t steps_done);
std::vector<std::string> training_sample(training_run& t, int64_t steps_done);
// Collective: the checkpoint, if due, and then the log lines of step r
// (which carry the checkpoint's stall), then the checkpoint's; r is
// logged even when the checkpoint fails.
void training_checkpoint_and_log(training_run& t, int64_t step, step_record& r);
// Collective: completes a checkpoint still being written (the end of the run).
void training_finish_checkpoints(training_run& t);
void training_print_stopped(const training_run& t, int64_t step);
// A run with no step to train validates and scores the weights it was given.
void training_validate_untrained(training_run& t);
void training_evaluate_untrained(training_run& t);
// Stops the backend and frees the communicators.
void training_finish(training_run& t);
