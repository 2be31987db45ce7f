// run_log: what a training run prints on rank 0: the banner before the first
// step, a line per logged step and the --metrics file's JSON line per step,
// and the summary after the last step.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/program.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/loss_scale.h"
#include "runtime/train/straggler.h"

// What the banner says beyond the program.
struct run_banner {
  std::string launcher;      // launch_info's: who started the ranks
  std::string backend;       // the backend's describe()
  std::string data;          // dataloader_describe, and where the run starts in it
  std::string val;           // the validation data and how often it is evaluated ("": none)
  std::string weights_from;  // "GPT-2 init" ("Llama init"), --init-from's file, or the checkpoint
                             // resumed
  int64_t steps = 0;         // the run's step count (the last step, 1-based)
  int64_t start_step = 0;    // steps done before this run (a resumed checkpoint's)
  bool resumed = false;
  int64_t tokens_per_step = 0;
  checkpoint_config ckpt;
  std::string ckpt_written;  // how checkpoints are written, e.g. "behind the next steps"
  std::string placement;     // placement_banner: hosts x ranks per host
};

// One multiple-choice evaluation (runtime/train/training_eval.cpp).
struct eval_record {
  int64_t step = 0;     // steps trained before it
  std::string name;     // what the log calls it: the file's name up to its first '_' or '.'
  double acc = 0;       // by each candidate's loss sum
  double acc_norm = 0;  // by its mean per completion token
  int64_t examples = 0;
  double seconds = 0;
};

// One trained step, as logged.
struct step_record {
  int64_t step = 0;  // 0-based
  double loss = 0;   // per token, over every rank
  double lr = 0;
  double grad_norm = 0;        // global, before clipping
  double seconds = 0;          // the step's wall time, with the loss all-reduce
  double loss_scale = 1;       // the scale the step ran with
  bool skipped = false;        // the optimizer skipped it: non-finite gradients, or a spike
  bool spike = false;          // ...the loss-spike guard left it out (runtime/train/guard.h)
  int64_t skipped_spike = -1;  // steps the guard left out so far (-1: no guard)
  int64_t epoch = 0;           // 0-based epoch of the training data the step's first sequence is in
  double tokens_per_s = 0;
  bool validated = false;          // the validation loss was evaluated after this step
  double val_loss = 0;             // per token, over val_sequences sequences
  double checkpoint_stall_s = -1;  // a checkpoint's step: the seconds it held the run up (-1: none)
  std::optional<eval_record> eval;   // the multiple-choice evaluation after this step
  std::vector<std::string> samples;  // the generations printed after this step (rank 0)
  memory_reading machine;
  std::optional<straggler_report> straggler;  // every --straggler-every steps (rank 0)
};

// One evaluation of the validation loss.
struct val_record {
  int64_t step = 0;  // steps trained before it (1-based: after step `step`)
  double loss = 0;
  int64_t sequences = 0;
  double seconds = 0;
};

// The steps this run trained, summed up.
struct run_totals {
  int64_t steps_run = 0;
  int64_t timed_steps = 0;    // steps after this run's first, whose time is its pace
  int64_t skipped = 0;        // with the spikes
  int64_t skipped_spike = 0;  // the loss-spike guard's
  double first_loss = 0, last_loss = 0;
  bool validated = false;
  double last_val_loss = 0;
  int64_t last_val_step = 0;  // the steps done when it was measured
  int64_t last_step = 0;      // the steps done at the end of this run
  double total_seconds = 0, timed_seconds = 0;
};

void run_log_banner(const program& p, const run_banner& b);
// The line of a validation (after the step's line, logged or not).
void run_log_val(const val_record& v, int64_t steps);
// The line of a multiple-choice evaluation (after the step's line, logged or not).
void run_log_eval(const eval_record& e, int64_t steps);
// One JSON line, flushed: whoever follows the file reads whole lines.
void run_log_metrics_line(std::FILE* f, const step_record& r);
// A resumed run's metrics file at `path`: keeps the lines of steps 1..step
// (what the checkpoint holds) and drops those of later steps, which the run
// trains again, so that the run appends to one file without repeating a
// step. Returns the lines dropped; nothing to do where there is no file.
// Throws, naming the file and line, where a line is not a metrics line (the
// file is left as it was).
int64_t run_log_metrics_resume(const std::string& path, int64_t step);
// eta_seconds: the rest of the run at the pace so far; the loss scale is
// shown when loss scaling is on.
void run_log_step(const step_record& r, int64_t steps, int64_t tokens_per_step, double eta_seconds,
                  const loss_scaler& scaler);
// The straggler line of a measured step whose busiest rank took notably
// longer than the median rank (straggler_notable), after the step's line.
void run_log_straggler(const step_record& r);
// The "done:" line, the memory report's lines, and the skipped steps if any.
void run_log_summary(const run_totals& t, int64_t tokens_per_step, const std::string& memory_lines,
                     const loss_scaler& scaler);
