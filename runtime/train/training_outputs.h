// training_outputs: what a run writes besides checkpoints, and what it
// gathers for them: outputs checked before any work, the log and --metrics
// lines (with the lines waiting for their step's), the run's totals, memory
// and straggler readings for the summary, the trace and --save.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/step_context.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/data.h"
#include "runtime/train/loss_scale.h"
#include "runtime/train/memory_report.h"
#include "runtime/train/run_log.h"
#include "runtime/train/run_shape.h"
#include "runtime/train/straggler.h"

struct training_outputs {
  // Collective: opens --metrics on rank 0 (a resumed run's keeps its lines
  // of the steps before `start_step`).
  void open_metrics(const run_shape& s, int64_t start_step);
  void close_metrics();
  // Step r in the totals (this run started after `start_step` steps).
  void count(const step_record& r, int64_t start_step);
  // The --metrics line of every step, the log line of every log_every-th,
  // its straggler, validation (`last_val`) and evaluation lines, then the
  // lines waiting for it.
  void log(const run_shape& s, const step_record& r, int64_t start_step, const loss_scaler& scaler,
           const val_record& last_val);
  // Collective: the memory report, and on rank 0 the summary.
  void print_summary(const run_shape& s, const backend& b, const loss_scaler& scaler) const;
  // The traced step (--trace-step, else the third of this run's), if this
  // run trained it: every rank's op times to rank 0, which writes them;
  // returns rank 0's write error or "". Collective.
  std::string write_trace(const run_shape& s, int64_t start_step, const val_record& last_val) const;

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics{nullptr, std::fclose};
  std::string lines;  // lines waiting for their step's line (checkpoints, spikes)
  std::chrono::steady_clock::time_point run_start;  // the first step's start
  run_totals totals;
  memory_watch memory;
  std::optional<straggler_gather> stragglers;  // made at set-up
  // The traced step's op times and loss.
  std::vector<int64_t> trace_start_ns, trace_end_ns;
  double trace_loss = 0;
};

// Collective: throws agreed_error on every rank when an output cannot be
// written, checkpoints' (`ckpt`) with them.
void check_outputs(const run_shape& s, const checkpoint_config& ckpt);
// The step --trace names: --trace-step, else the third of this run's (after
// `start_step` steps) or its last.
int64_t trace_step(const run_shape& s, int64_t start_step);
// Collective: --save after `steps_done` steps, unless the run stopped early
// (`stopped`); a model directory's files from the training data.
void save_weights(const run_shape& s, step_context& c, backend& b, const dataloader& data,
                  int64_t steps_done, bool stopped);
