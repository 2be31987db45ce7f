// training_run: one run of the generated binary, from its checks to its last
// outputs, as the training loop (runtime/train/train.cpp) calls it. Its members
// live in the file of their concept: runtime/train/training_run.cpp (set-up,
// weights, banner, end), training_data.cpp, training_step.cpp,
// training_validation.cpp, training_checkpoints.cpp (saving and resuming)
// and training_outputs.cpp (metrics, trace, summary, --save).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/eval_file.h"
#include "runtime/launch.h"
#include "runtime/muon_layout.h"
#include "runtime/optimizer.h"
#include "runtime/program.h"
#include "runtime/step_context.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/data.h"
#include "runtime/train/guard.h"
#include "runtime/train/loss_scale.h"
#include "runtime/train/memory_report.h"
#include "runtime/train/run_log.h"
#include "runtime/train/straggler.h"
#include "runtime/train/train_flags.h"

struct training_sampler;  // runtime/train/training_samples.cpp

// Where a step's rows come from (step_inputs, runtime/step_context.h): rank
// r's micro-batch m of a training step is the (r * micro_batches + m)-th
// micro_batch-sized slice of the step's global batch in data; a validation
// pass's rows are val's. Each fill appends its lines to --trace-data's file
// (trace_fd; -1: off). Defined in runtime/train/training_data.cpp.
struct training_inputs final : step_inputs {
  const dataloader* data = nullptr;
  const dataloader* val = nullptr;
  int trace_fd = -1;
  void fill(const step_context& c, int64_t mb, int32_t* tokens, int32_t* targets) const override;
};

// One training run, from its checks to its last outputs. run()
// (runtime/train/train.cpp) calls its steps in order; collective steps are called
// on every rank, and each prints what it did on rank 0.
class training_run {
 public:
  // `run`: the run as launched (run_settings); `resume_from`: the
  // checkpoint --resume names ("" without --resume), `resumed` its manifest.
  training_run(const program& p, const train_options& o, const checkpoint_run& run,
               std::string resume_from, const checkpoint_manifest& resumed, const launch_info& li);

  int64_t first_step() const { return start_step_; }
  int64_t steps() const { return steps_; }
  bool stop_requested() const { return stop_; }
  // The exit status of a run that ended: 0, or kGuardExitCode when the
  // loss-spike guard stopped it.
  int exit_status() const { return guard_stop_.empty() ? 0 : kGuardExitCode; }

  // Before any work, every output this rank will write can be written.
  void check_outputs() const;
  // The data, the communicators and the backend (its arena).
  void set_up(const backend_kind& kind);
  // From the checkpoint --resume names, --init-from's file, or the seed.
  void load_weights();
  void fill_rope_tables();
  void print_banner() const;
  void open_metrics();
  // Trains 0-based step `step` and agrees with the other ranks on its loss
  // and whether to stop after it.
  step_record train_step(int64_t step);
  // After `steps_done` steps: every val_every steps, at checkpoints and at the end.
  bool validation_due(int64_t steps_done) const;
  // Collective: the mean per-token loss over val's first val_sequences
  // sequences, by the plan's validation pass.
  val_record validate(int64_t steps_done);
  // A run with no step to train evaluates the weights it was given.
  void validate_untrained();
  // Multiple-choice evaluation (runtime/train/training_eval.cpp): after
  // `steps_done` steps, every eval_every steps, at checkpoints and at the end.
  bool eval_due(int64_t steps_done) const;
  // Collective: acc and acc_norm over the evaluation file's first
  // eval_examples examples, by the plan's validation pass.
  eval_record evaluate(int64_t steps_done);
  // A run with no step to train scores the weights it was given.
  void evaluate_untrained();
  // Samples (runtime/train/training_samples.cpp): after `steps_done` steps, every sample_every
  // steps.
  bool samples_due(int64_t steps_done) const;
  // Collective: every rank's weights to rank 0, which prints a few
  // generations from the document start and returns them (empty elsewhere).
  std::vector<std::string> sample(int64_t steps_done);
  // The --metrics line of every step, the log line of every log_every-th.
  void log(const step_record& r);
  // Every checkpoint_every steps, at the end, and when asked to stop.
  bool checkpoint_due(int64_t step) const;
  // Collective: the checkpoint, if due, and then the log lines of step r
  // (which carry the checkpoint's stall), then the checkpoint's; r is
  // logged even when the checkpoint fails.
  void checkpoint_and_log(int64_t step, step_record& r);
  // Collective: completes a checkpoint still being written (the end of the run).
  void finish_checkpoints();
  void print_stopped(int64_t step) const;
  void close_metrics();
  // With the memory report (collective).
  void print_summary() const;
  // The traced step, if this run trained it; returns rank 0's write error or "".
  std::string write_trace() const;
  // --save, unless the run stopped early.
  void save_weights();
  // Stops the backend and frees the communicators.
  void finish();

 private:
  void resume();
  void open_data();
  void open_eval();
  void open_samples();
  std::string samples_banner() const;
  void write_eval_scores(const std::vector<double>& loss_sums) const;
  void warn_if_val_is_trained_on() const;
  void scale_gradients(int64_t step);
  double agree_on_loss(double loss_sum, bool skipped);
  void guard_step(step_record& r, const step_result& result);
  std::string rows_of_step(int64_t step) const;
  std::string rows_of_rank(int64_t step, int64_t rank) const;
  void count(const step_record& r);
  void run_log_step_if_due(const step_record& r) const;
  void save_checkpoint(int64_t step, step_record& r);
  void finish_pending_checkpoint();
  int64_t trace_step() const;
  bool straggler_due(int64_t step, bool traced) const;

  const program& p_;
  const train_options& o_;
  const checkpoint_run run_;
  const std::string resume_from_;
  const checkpoint_manifest& resumed_;  // resume_from_'s manifest
  const launch_info& li_;
  const bool lead_;
  const int64_t steps_;
  const checkpoint_config ckpt_;
  const int64_t log_every_;
  const int64_t tokens_per_step_;
  const int64_t val_every_;  // 0: no validation
  int64_t val_sequences_;    // the run's, or all the validation data holds where that is fewer
  arena mem_;
  step_context c_;
  dataloader data_;
  dataloader val_;
  training_inputs inputs_;   // c_.inputs: data_'s and val_'s rows
  double data_open_ms_ = 0;  // opening the training data: expanding, mapping, checking headers
  optimizer_decay_table decay_;
  muon_layout muon_;  // optimizer = muon(...): this rank's part (empty otherwise)
  // Declared after what it points into, so that it is destroyed (stopping
  // its threads or freeing the device after a failure) before them.
  std::unique_ptr<backend> b_;
  // Writes checkpoints behind the steps (null: synchronously); after b_,
  // whose arena it reads, so that it is joined first.
  std::unique_ptr<checkpoint_writer> ckpt_writer_;
  double staged_s_ = 0;        // the pending checkpoint's staging (checkpoint_writer::start)
  double staged_stall_s_ = 0;  // its step's stall: that and completing the one before
  std::string ckpt_lines_;     // lines waiting for their step's line (checkpoints, spikes)
  int64_t seed_ = 0;
  int64_t start_step_ = 0;
  loss_scaler scaler_;
  std::string weights_from_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> metrics_{nullptr, std::fclose};
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> data_trace_{nullptr, std::fclose};
  std::chrono::steady_clock::time_point run_start_;  // the first step's start
  std::vector<int64_t> trace_start_ns_, trace_end_ns_;
  double trace_loss_ = 0;
  std::optional<straggler_gather> stragglers_;  // made at set-up
  memory_watch memory_;
  run_totals totals_;
  spike_guard guard_;
  bool stop_ = false;
  // Why the run stops early (stop_), for its last line and exit status:
  // empty for a signal, else the guard's reason (kGuardExitCode).
  std::string guard_stop_;
  bool data_error_ = false;      // some rank found a bad token id in this step's batch
  std::string data_error_text_;  // ...this one, if it did
  val_record last_val_;
  // Multiple-choice evaluation: the file (no examples: none), its examples
  // scored, how often (0: never).
  eval_file eval_;
  int64_t eval_examples_ = 0;
  int64_t eval_every_ = 0;
  // Samples: every sample_every_ steps (0: none); rank 0's generator and
  // buffers (null elsewhere), made at set-up before the arena.
  int64_t sample_every_ = 0;
  std::shared_ptr<training_sampler> sampler_;
};

// The training or validation data as the run reads it (runtime/train/training_data.cpp):
// the spec's source, or the flag's files (`flag`: the run's, `given`: this
// launch's), of `role` "data" or "val".
data_config data_config_of(const program& p, const program_data& spec,
                           const std::vector<std::string>& flag,
                           const std::vector<std::string>& given, bool allow_bytes, bool shuffle,
                           const char* role);

// Resuming (runtime/train/training_checkpoints.cpp), before the run is made.

// What --resume names, as rank 0 sees it (collective: every rank loads the
// same one); without a value, the newest checkpoint in `checkpoint_dir`. With
// --resume-if-exists that newest one, or "" where there is none (a fresh run).
std::string resume_path(const train_options& o, const std::string& checkpoint_dir, bool lead);

// Collective: the manifest of the checkpoint --resume names (an agreed
// error when any rank cannot read it); empty without --resume.
checkpoint_manifest read_resumed_manifest(const std::string& resume_from);

// The run as launched: `launched` (the flags over the spec), or resumed, the
// checkpoint's record (in its manifest m) with the flags given over it
// (collective: the warnings print on rank 0, a changed global batch not
// allowed is an error on every rank).
checkpoint_run resolve_run(const program& p, const train_options& o, const checkpoint_run& launched,
                           const std::string& resume_from, const checkpoint_manifest& m, bool lead);
