// train: the generated binary's main loop, the same for every target. Parses
// the binary's flags, launches, sets up communicators, data, the backend
// (runtime/backend.h: arena and executor) and weights, runs the planned step
// `steps` times, logs (runtime/run_log.h) and writes checkpoints, weights,
// metrics and the trace. run() lists a run's steps in order.
#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/allocations.h"
#include "runtime/arena.h"
#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/checkpoint.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/files/file_io.h"
#include "runtime/flags.h"
#include "runtime/guard.h"
#include "runtime/human.h"
#include "runtime/init.h"
#include "runtime/launch.h"
#include "runtime/loss_scale.h"
#include "runtime/memory_report.h"
#include "runtime/optimizer.h"
#include "runtime/rope.h"
#include "runtime/run_log.h"
#include "runtime/run_settings.h"
#include "runtime/step.h"
#include "runtime/straggler.h"
#include "runtime/trace.h"
#include "runtime/watchdog.h"
#include "runtime/weights.h"

namespace {

// Preemption: SIGUSR1 or SIGTERM (what Slurm sends before a time limit or a
// preemption, e.g. `sbatch --signal=B:USR1@120`; mpirun forwards SIGUSR1)
// asks the run to stop after the step in progress, with a checkpoint. Ranks
// learn it from one another with the step's loss all-reduce, so that all stop
// after the same step.
std::atomic<int> g_stop_signal{0};

extern "C" void request_stop(int sig) {
  g_stop_signal.store(sig, std::memory_order_relaxed);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = request_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

struct options {
  run_flags run;  // what shapes the run (runtime/run_settings.h)
  std::string init_from;
  std::string trace;
  int64_t trace_step = -1;
  std::string trace_data;
  int64_t straggler_every = 100;  // 0: never
  bool print_schedule = false;
  int64_t seed = -1;
  int64_t inject_overflow = -1;
  std::vector<int64_t> inject_spike;  // 0-based steps whose losses and gradient are multiplied
  int64_t inject_leak_bytes = 0;
  double inject_grad_scale = 1;
  std::string inject_stall;  // RANK:STEP:SECONDS (runtime/watchdog.h)
  watchdog_options watch;
  bool checkpoint_sync = false;  // write each checkpoint before the next step (no staging)
  bool no_watchdog = false;      // run without the watchdog (its cost measured against none)
  bool resume = false;
  std::string resume_from;  // empty: the newest checkpoint in the checkpoint directory
  bool allow_batch_change = false;
  std::string binary;  // argv[0], for the commands the run prints
  backend_options backend;
};

// A spec's data source (paths one per line), or what a flag gave instead:
// "synthetic", one text file, or token files and glob patterns (.bin).
data_config data_config_of(const program& p, const program_data& spec,
                           const std::vector<std::string>& flag, bool shuffle, const char* role) {
  data_config d;
  d.vocab = p.model.vocab;
  d.context = p.model.context;
  d.seed = static_cast<uint64_t>(spec.seed);
  d.kind = spec.source == data_source::synthetic ? data_kind::synthetic
           : spec.source == data_source::text    ? data_kind::text
                                                 : data_kind::tokens;
  for (const char* at = spec.paths; *at;) {
    const char* end = std::strchr(at, '\n');
    d.paths.emplace_back(at, end ? end : at + std::strlen(at));
    at = end ? end + 1 : at + std::strlen(at);
  }
  if (!flag.empty()) {
    d.paths.clear();
    if (flag.size() == 1 && flag[0] == "synthetic") {
      d.kind = data_kind::synthetic;
    } else {
      auto is_bin = [](const std::string& f) {
        return f.size() > 4 && f.compare(f.size() - 4, 4, ".bin") == 0;
      };
      d.kind = flag.size() == 1 && !is_bin(flag[0]) ? data_kind::text : data_kind::tokens;
      d.paths = flag;
    }
  }
  d.shuffle = shuffle && d.kind != data_kind::synthetic;
  d.role = role;
  return d;
}

// What --resume names, as rank 0 sees it (collective: every rank loads the
// same one); without a value, the newest checkpoint in `checkpoint_dir`.
std::string resume_path(const options& o, const std::string& checkpoint_dir, bool lead) {
  std::string path, error;
  if (lead) {
    try {
      path = checkpoint_resolve(o.resume_from.empty() ? checkpoint_dir : o.resume_from);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  agree_on_error(error, "resuming from a checkpoint");
  int64_t n = static_cast<int64_t>(path.size());
  comm_broadcast(MPI_COMM_WORLD, &n, sizeof n, 0);
  path.resize(static_cast<size_t>(n));
  comm_broadcast(MPI_COMM_WORLD, path.data(), n, 0);
  return path;
}

// Why the file `path` (given with `flag`) could not be written, or "".
// Creates nothing that stays. A FIFO would wait for a reader, at the end of
// the run or forever, and a device such as /dev/zero would keep nothing.
std::string output_file_problem(const char* flag, const std::string& path) {
  if (const std::string kind = file_special_kind(path); !kind.empty())
    return fmt::format("{} {}: cannot write there: it is {}, not a regular file", flag, path, kind);
  const file_write_problem p = file_write_check(path);
  std::string why;
  switch (p.what) {
    case file_write_problem::none:
      return "";
    case file_write_problem::is_directory:
      why = "it is a directory";
      break;
    case file_write_problem::no_directory:
    case file_write_problem::not_a_directory:
      why = fmt::format("{} is not a directory", p.dir);
      break;
    case file_write_problem::cannot_create:
      why = fmt::format("{}: {}", p.dir, p.error);
      break;
    case file_write_problem::cannot_open:
      why = p.error;
      break;
  }
  return fmt::format("{} {}: cannot write there: {}", flag, path, why);
}

// The Hugging Face model family whose tensor names --save writes.
const char* hf_family_name(const program& p) {
  return p.model.family == model_family::llama ? "Llama" : "GPT-2";
}

// --inject-leak: heap bytes allocated, touched and never freed, as a step
// that leaked would.
void leak(int64_t bytes) {
  static std::vector<std::unique_ptr<char[]>> kept;
  kept.emplace_back(new char[static_cast<size_t>(bytes)]);
  std::memset(kept.back().get(), 1, static_cast<size_t>(bytes));
}

// Every rank's op times of the traced step, gathered on rank 0 (collective),
// written there as a Chrome trace to `path`; returns rank 0's write error or "".
std::string gather_and_write_trace(const program& p, const std::string& path, int64_t trace_step,
                                   const std::vector<int64_t>& start_ns,
                                   const std::vector<int64_t>& end_ns, const trace_losses& losses,
                                   bool lead) {
  std::vector<int64_t> mine = start_ns;
  mine.insert(mine.end(), end_ns.begin(), end_ns.end());
  std::vector<int64_t> all(lead ? mine.size() * static_cast<size_t>(p.parallel.world) : 0);
  MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                       static_cast<int>(mine.size()), MPI_INT64_T, 0, MPI_COMM_WORLD));
  if (!lead) return "";
  std::vector<std::vector<int64_t>> starts, ends;
  const size_t n = static_cast<size_t>(p.op_count);
  for (int64_t r = 0; r < p.parallel.world; ++r) {
    auto base = all.begin() + static_cast<ptrdiff_t>(r * 2 * n);
    starts.emplace_back(base, base + static_cast<ptrdiff_t>(n));
    ends.emplace_back(base + static_cast<ptrdiff_t>(n), base + static_cast<ptrdiff_t>(2 * n));
  }
  std::ofstream f(path);
  f << trace_json(p, trace_step, starts, ends, losses);
  f.close();
  const double hidden = trace_hidden_comm_fraction(p, starts, ends);
  if (!f) return fmt::format("cannot write {}: {}", path, std::strerror(errno));
  std::printf(
      "trace: step %lld of %lld ranks written to %s (%s)\n", static_cast<long long>(trace_step + 1),
      static_cast<long long>(p.parallel.world), path.c_str(),
      hidden < 0
          ? "no communication"
          : fmt::format("communication hidden behind compute: {:.0f}%", 100 * hidden).c_str());
  return "";
}

// One training run, from its checks to its last outputs. run() below calls
// its steps in order; collective steps are called on every rank, and each
// prints what it did on rank 0.
class training_run {
 public:
  // `run`: the run as launched (run_settings); `resume_from`: the
  // checkpoint --resume names ("" without --resume), `resumed` its manifest.
  training_run(const program& p, const options& o, const checkpoint_run& run,
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
  const options& o_;
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
  double data_open_ms_ = 0;  // opening the training data: expanding, mapping, checking headers
  optimizer_decay_table decay_;
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
};

training_run::training_run(const program& p, const options& o, const checkpoint_run& run,
                           std::string resume_from, const checkpoint_manifest& resumed,
                           const launch_info& li)
    : p_(p),
      o_(o),
      run_(run),
      resume_from_(std::move(resume_from)),
      resumed_(resumed),
      li_(li),
      lead_(li.rank == 0),
      steps_(run.steps),
      ckpt_{run.checkpoint_every, run.checkpoint_dir, run.checkpoint_keep},
      log_every_(run.log_every),
      tokens_per_step_(p.parallel.world * p.parallel.micro_batches * p.parallel.micro_batch *
                       p.model.context),
      val_every_(run.val_every),
      val_sequences_(run.val_sequences),
      guard_(guard_start(p.train.guard)) {}

// Collective: throws agreed_error on every rank when an output cannot be
// written (checkpoints' directory created when checkpoints are planned; a
// stop signal's checkpoint needs it too). --metrics and --trace are written
// by rank 0 alone, --trace-data by every rank.
void training_run::check_outputs() const {
  std::string error;
  if (!run_.save.empty()) error = output_file_problem("--save", run_.save);
  if (lead_ && error.empty() && !run_.metrics.empty())
    error = output_file_problem("--metrics", run_.metrics);
  if (lead_ && error.empty() && !o_.trace.empty()) error = output_file_problem("--trace", o_.trace);
  if (error.empty() && !o_.trace_data.empty())
    error = output_file_problem("--trace-data", o_.trace_data);
  if (error.empty() && steps_ > 0) {
    const std::string why = checkpoint_dir_problem(ckpt_.dir, ckpt_.every > 0);
    if (!why.empty())
      error = ckpt_.dir == p_.train.checkpoint.dir
                  ? fmt::format("the spec's checkpoint directory {}: {}", ckpt_.dir, why)
                  : fmt::format("--checkpoint-dir {}: {}", ckpt_.dir, why);
  }
  agree_on_error(error, "checking the outputs");
}

void training_run::set_up(const backend_kind& kind) {
  c_.p = &p_;
  b_ = kind.make(p_);
  open_data();
  c_.comms = comm_create(p_.parallel.shard_group);
  c_.data = &data_;
  c_.val = &val_;
  decay_ = optimizer_decay_ranges(p_, c_.comms.shard_rank);
  c_.decay_ranges = decay_.pointers.data();
  c_.decay_range_counts = decay_.counts.data();
  std::string error;
  try {
    b_->start(c_, mem_, o_.backend);
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    if (error.empty() && ckpt_.every > 0 && !o_.checkpoint_sync && checkpoint_writer::available(p_))
      ckpt_writer_ = std::make_unique<checkpoint_writer>(p_);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "set-up");
  memory_.settle_steps = std::max<int64_t>(1, b_->warmup_steps());
  stragglers_.emplace(p_.parallel.world, lead_);
}

// Collective: the training data and, when validated, the validation data.
// Nothing is read yet: files are checked and mapped.
void training_run::open_data() {
  std::string error;
  try {
    const auto t0 = std::chrono::steady_clock::now();
    data_ = dataloader_open(data_config_of(p_, p_.train.data, run_.data, run_.shuffle, "data"));
    data_open_ms_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  } catch (const std::exception& e) {
    error = e.what();
    if (run_.data.empty())
      error += fmt::format(
          " (the data of {}, found from that spec's directory as fsdpgen was given it: run "
          "where fsdpgen ran, or pass --data FILES)",
          p_.spec_path);
  }
  if (error.empty() && val_every_ > 0) {
    if (p_.train.val_every == 0 && run_.val.empty())
      error =
          fmt::format("--val-every {}: the spec names no validation data; pass --val FILES as well",
                      val_every_);
    try {
      if (error.empty()) {
        val_ = dataloader_open(data_config_of(p_, p_.train.val, run_.val, false, "val"));
        const int64_t have = dataloader_sequences(val_);
        if (have > 0 && have < val_sequences_) {
          if (lead_)
            std::printf(
                "note: val: %s: fewer than the %s sequences of val_sequences; each "
                "validation reads all %s\n",
                dataloader_describe(val_).c_str(), with_commas(val_sequences_).c_str(),
                with_commas(have).c_str());
          val_sequences_ = have;
        }
        warn_if_val_is_trained_on();
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (error.empty() && !o_.trace_data.empty()) {
    data_trace_.reset(std::fopen(o_.trace_data.c_str(), "a"));  // every rank appends whole lines
    if (!data_trace_)
      error = fmt::format("--trace-data {}: cannot write there: {}", o_.trace_data,
                          std::strerror(errno));
    else
      c_.data_trace_fd = fileno(data_trace_.get());
  }
  agree_on_error(error, "opening the data");
}

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

// llama: the rotary tables, computed once into the plan's buffer.
void training_run::fill_rope_tables() {
  if (p_.plan.rope_buffer < 0) return;
  const program_model& m = p_.model;
  const int64_t D = m.width / m.heads;
  b_->with_host_weights(c_, true, [&] {
    float* cos = step_buffer<float>(c_, static_cast<int>(p_.plan.rope_buffer));
    rope_tables(cos, cos + m.context * (D / 2), m.context, D, m.rope.theta,
                {m.rope.factor, m.rope.low_freq, m.rope.high_freq, m.rope.original_context});
  });
}

void training_run::load_weights() {
  fill_rope_tables();
  seed_ = o_.seed >= 0 ? o_.seed : p_.train.seed;
  // The data's order is the run's seed's (a resumed run's: its checkpoint's).
  dataloader_set_shuffle_seed(data_, static_cast<uint64_t>(seed_));
  scaler_ = loss_scaler_start(p_);
  weights_from_ = o_.init_from.empty() ? init_describe(p_) : o_.init_from;
  if (o_.resume) return resume();
  b_->with_host_weights(c_, true, [&] {
    if (o_.init_from.empty())
      weights_init(c_, static_cast<uint64_t>(seed_));
    else
      weights_load(c_, o_.init_from);
  });
}

// The weights, the step, the loss scaler, the seed and the data position
// from a checkpoint.
void training_run::resume() {
  const std::string& path = resume_from_;
  checkpoint_state resumed;
  b_->with_host_weights(c_, true, [&] { resumed = checkpoint_load(c_, path, resumed_); });
  start_step_ = resumed.step;
  scaler_ = resumed.scaler;
  guard_restore(guard_, resumed.guard_losses, resumed.guard_norms, resumed.guard_skips_in_row);
  seed_ = resumed.seed;
  dataloader_set_shuffle_seed(data_, static_cast<uint64_t>(seed_));
  c_.sequence_base = resumed.sequences - start_step_ * checkpoint_sequences_per_step(p_);
  weights_from_ = fmt::format("resumed from {} (step {}, {} sequences read)", path, start_step_,
                              with_commas(resumed.sequences));
  if (lead_ && resumed.data != dataloader_describe(data_))
    std::printf("note: the checkpoint was written reading %s; this run reads %s\n",
                resumed.data.c_str(), dataloader_describe(data_).c_str());
}

void training_run::print_banner() const {
  if (!lead_) return;
  std::string data = dataloader_describe(data_);
  if (const int64_t W = dataloader_sequences(data_); W > 0) {
    const int64_t next = c_.sequence_base + start_step_ * checkpoint_sequences_per_step(p_);
    const double epochs = static_cast<double>(steps_ - start_step_) *
                          static_cast<double>(checkpoint_sequences_per_step(p_)) /
                          static_cast<double>(W);
    data += fmt::format("; epoch {} from sequence {} of it, {:.3g} epochs this run",
                        dataloader_epoch(data_, next) + 1, with_commas(next % W), epochs);
    data += fmt::format(" (checked and mapped in {:.1f} ms)", data_open_ms_);
  }
  std::string val;
  if (val_every_ > 0)
    val = fmt::format("{}; its first {} sequences every {}, at checkpoints and at the end",
                      dataloader_describe(val_), with_commas(val_sequences_),
                      val_every_ == 1 ? "step" : fmt::format("{} steps", val_every_));
  std::string written = "written before the next step";
  if (ckpt_writer_)
    written = fmt::format(
        "written behind the next steps from the plan's host staging buffer ({:.2f} MiB)",
        mib(p_.buffers[p_.plan.checkpoint_staging_buffer].bytes));
  else if (!o_.checkpoint_sync)
    written += " (the spec plans no checkpoint, so the plan stages none)";
  run_log_banner(p_, {li_.launcher, b_->describe(), data, val, weights_from_, steps_, start_step_,
                      o_.resume, tokens_per_step_, ckpt_, written});
  if (const std::string note = optimizer_warmup_note(p_, steps_); !note.empty())
    std::printf("warning: %s\n", note.c_str());
}

void training_run::open_metrics() {
  std::string error;
  if (lead_ && !run_.metrics.empty()) {
    const char* mode = "w";
    if (o_.resume) {
      try {
        const int64_t dropped = run_log_metrics_resume(run_.metrics, start_step_);
        mode = "a";
        if (dropped > 0)
          std::printf(
              "metrics: %s keeps its lines of steps 1-%lld; %lld of later steps, "
              "trained again now, dropped\n",
              run_.metrics.c_str(), static_cast<long long>(start_step_),
              static_cast<long long>(dropped));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    if (error.empty()) {
      metrics_.reset(std::fopen(run_.metrics.c_str(), mode));
      if (!metrics_) error = fmt::format("cannot write {}: {}", run_.metrics, std::strerror(errno));
    }
  }
  agree_on_error(error, "opening --metrics");
}

step_record training_run::train_step(int64_t step) {
  if (step == start_step_) run_start_ = std::chrono::steady_clock::now();
  step_record r;
  r.step = step;
  r.lr = optimizer_lr(p_, step, steps_);
  r.loss_scale = scaler_.scale;
  scale_gradients(step);
  const guard_limits limits = guard_limits_of(guard_);
  c_.norm_limit = static_cast<float>(limits.norm);
  c_.loss_total_limit = static_cast<float>(limits.loss * static_cast<double>(tokens_per_step_));
  const bool traced = !o_.trace.empty() && step == trace_step();
  const bool straggler = straggler_due(step, traced);
  const auto t0 = std::chrono::steady_clock::now();
  allocations_count(step - start_step_ >= b_->warmup_steps());
  const step_result result = b_->run_step(step, r.lr, traced || straggler);
  if (o_.inject_leak_bytes > 0) leak(o_.inject_leak_bytes);
  allocations_count(false);
  const double loss_sum = agree_on_loss(result.loss_sum, result.skipped);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (data_error_)  // a batch held a token id >= vocab: every rank stops, its finder says where
    agree_on_error(data_error_text_, "reading the training data");
  r.loss = loss_sum / static_cast<double>(tokens_per_step_);
  r.tokens_per_s = static_cast<double>(tokens_per_step_) / r.seconds;
  const int64_t per_step = checkpoint_sequences_per_step(p_);
  const int64_t first = c_.sequence_base + step * per_step;
  r.epoch = dataloader_epoch(data_, first);
  const int64_t last_epoch = dataloader_epoch(data_, first + per_step - 1);
  if (lead_ && step > start_step_ && last_epoch > dataloader_epoch(data_, first - 1))
    std::printf("data: epoch %lld begins within step %lld (every sequence of epoch %lld read)\n",
                static_cast<long long>(last_epoch + 1), static_cast<long long>(step + 1),
                static_cast<long long>(last_epoch));
  r.grad_norm = result.grad_norm;
  r.skipped = result.skipped;
  // A spike's gradients were finite: the loss scale stays as it was.
  if (!result.spike) loss_scaler_update(scaler_, r.skipped);
  guard_step(r, result);
  r.machine = b_->read_memory();
  memory_watch_step(memory_, r.machine);
  count(r);
  if (traced) {
    trace_start_ns_ = b_->op_start_ns(), trace_end_ns_ = b_->op_end_ns();
    trace_loss_ = r.loss;
  }
  if (straggler) r.straggler = stragglers_->measure(p_, b_->op_start_ns(), b_->op_end_ns());
  return r;
}

// Every --straggler-every steps at world > 1, but not the traced step: its
// times are the trace's alone.
bool training_run::straggler_due(int64_t step, bool traced) const {
  return o_.straggler_every > 0 && p_.parallel.world > 1 && (step + 1) % o_.straggler_every == 0 &&
         !traced;
}

// The loss scaler's scale for the step's gradients, and the testing aids'.
void training_run::scale_gradients(int64_t step) {
  const double grad_scale = loss_scaler_grad_scale(scaler_);
  c_.grad_scale = static_cast<float>(grad_scale);
  c_.dloss_scale = static_cast<float>(grad_scale / tokens_per_step_);
  // As a wrong average across ranks would: every gradient scaled, unknown to the optimizer.
  if (p_.parallel.world > 1) c_.dloss_scale *= static_cast<float>(o_.inject_grad_scale);
  // As an fp16 overflow would: every gradient of this step becomes non-finite.
  if (step == o_.inject_overflow) c_.dloss_scale = std::numeric_limits<float>::infinity();
  // As a bad batch would: its losses and gradients many times the others'.
  const bool spike =
      std::find(o_.inject_spike.begin(), o_.inject_spike.end(), step) != o_.inject_spike.end();
  c_.inject_loss_factor = spike ? static_cast<float>(kInjectedSpikeFactor) : 1.0f;
  if (spike) c_.dloss_scale *= static_cast<float>(kInjectedSpikeFactor);
  c_.optimizer_step = scaler_.applied_steps + 1;
}

// The loss summed over every rank; with it, how many ranks were asked to
// stop and how many found a bad token id in their batch.
double training_run::agree_on_loss(double loss_sum, bool skipped) {
  data_error_text_ = dataloader_take_error(data_);
  const bool bad = !data_error_text_.empty();
  const double mine[4] = {loss_sum, g_stop_signal.load() ? 1.0 : 0.0, bad ? 1.0 : 0.0,
                          skipped ? 1.0 : 0.0};
  double all[4] = {0, 0, 0, 0};
  {
    const watch_outside_step watched(kWatchLossAllReduce, trace_clock_ns());
    MPI_CHECK(MPI_Allreduce(mine, all, 4, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  }
  stop_ = all[1] > 0;
  data_error_ = all[2] > 0;
  // Every rank's gate saw the same all-reduced values; one that did not would
  // leave the shards of one model at two different steps.
  if (all[3] > 0 && all[3] < static_cast<double>(p_.parallel.world))
    throw std::runtime_error(fmt::format(
        "step {}: {} of {} ranks skipped the optimizer step and the others applied it (the "
        "ranks' gradient norms or losses differ): the shards would hold two different models",
        c_.step + 1, all[3], p_.parallel.world));
  return all[0];
}

// Where each rank's rows of `step` are read from, one rank a line.
std::string training_run::rows_of_step(int64_t step) const {
  std::string out;
  for (int64_t rank = 0; rank < p_.parallel.world; ++rank)
    out += rows_of_rank(step, rank);
  return out;
}

// Rank `rank`'s rows of `step` (step_fill_inputs reads them): one line, the
// first kRowsNamedPerRank located (a large batch's line stays readable; the
// sequence range names them all).
std::string training_run::rows_of_rank(int64_t step, int64_t rank) const {
  constexpr int64_t kRowsNamedPerRank = 8;
  const int64_t W = p_.parallel.world, M = p_.parallel.micro_batches, B = p_.parallel.micro_batch;
  const int64_t first = c_.sequence_base + (step * W * M + rank * M) * B, rows = M * B;
  std::string out = fmt::format("  rank {}: sequences {}..{}:", rank, first, first + rows - 1);
  for (int64_t j = first; j < first + std::min(rows, kRowsNamedPerRank); ++j)
    out += (j == first ? " " : "; ") + dataloader_locate(data_, j);
  if (rows > kRowsNamedPerRank) out += fmt::format("; {} more", rows - kRowsNamedPerRank);
  return out + "\n";
}

// The loss-spike guard after a step: a spike is logged with its data and
// counted; max_skips in a row stop the run with a checkpoint. Outside fp16
// loss scaling, a loss or norm that is not finite stops the run at once (no
// checkpoint: the last one stays the newest).
void training_run::guard_step(step_record& r, const step_result& result) {
  r.spike = result.spike;
  if (!scaler_.enabled && (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))) {
    // The rank whose own rows gave a non-finite loss says so; else rank 0
    // names every rank's rows.
    const bool mine = !std::isfinite(result.loss_sum);
    std::string why;
    if (mine || lead_)
      why = fmt::format(
          "step {}: the {} is not finite ({}) without fp16 loss scaling: the step was not applied "
          "and the run stops (the last checkpoint is kept as it was); {}",
          r.step + 1, std::isfinite(r.loss) ? "gradient norm" : "loss",
          std::isfinite(r.loss) ? r.grad_norm : r.loss,
          mine ? fmt::format("this rank's loss over its rows is {}:\n{}", result.loss_sum,
                             rows_of_rank(r.step, li_.rank))
               : fmt::format("the step's rows:\n{}", rows_of_step(r.step)));
    agree_on_error(why, "guarding against a non-finite loss");
  }
  if (!guard_enabled(guard_)) return;
  totals_.skipped_spike += r.spike;
  r.skipped_spike = totals_.skipped_spike;
  const bool too_many = guard_after_step(guard_, !r.skipped, r.spike, r.loss, r.grad_norm);
  if (r.spike && lead_) {
    const guard_limits limits{c_.loss_total_limit / static_cast<double>(tokens_per_step_),
                              c_.norm_limit};
    ckpt_lines_ += fmt::format(
        "spike: step {} not applied (the loss-spike guard): loss {:.6f} (limit {:.6f}), gradient "
        "norm {:.4f} (limit {:.4f}); {} in a row (max_skips {}). Its rows:\n{}",
        r.step + 1, r.loss, limits.loss, r.grad_norm, limits.norm, guard_.skips_in_row,
        guard_.g.max_skips, rows_of_step(r.step));
  }
  if (too_many && guard_stop_.empty()) {
    stop_ = true;
    guard_stop_ = fmt::format(
        "the loss-spike guard left out {} steps in a row (steps {} to {}, max_skips {})",
        guard_.skips_in_row, r.step + 2 - guard_.skips_in_row, r.step + 1, guard_.g.max_skips);
  }
}

void training_run::count(const step_record& r) {
  totals_.steps_run = r.step + 1 - start_step_;
  totals_.last_step = r.step + 1;
  totals_.skipped += r.skipped;
  if (r.step == start_step_) totals_.first_loss = r.loss;
  totals_.last_loss = r.loss;
  totals_.total_seconds += r.seconds;
  if (r.step > start_step_) totals_.timed_seconds += r.seconds, ++totals_.timed_steps;
}

void training_run::log(const step_record& r) {
  if (metrics_) run_log_metrics_line(metrics_.get(), r);
  run_log_step_if_due(r);
  if (lead_ && r.straggler && straggler_notable(*r.straggler)) run_log_straggler(r);
  if (lead_ && r.validated) run_log_val(last_val_, steps_);
  if (!ckpt_lines_.empty()) {
    std::fputs(ckpt_lines_.c_str(), stdout);
    std::fflush(stdout);
    ckpt_lines_.clear();
  }
}

void training_run::run_log_step_if_due(const step_record& r) const {
  const bool logged =
      (r.step + 1) % log_every_ == 0 || r.step == start_step_ || r.step + 1 == steps_;
  if (!lead_ || !logged) return;
  const double elapsed_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start_).count();
  const double eta_s = elapsed_s / static_cast<double>(r.step + 1 - start_step_) *
                       static_cast<double>(steps_ - r.step - 1);
  run_log_step(r, steps_, tokens_per_step_, eta_s, scaler_);
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

bool training_run::checkpoint_due(int64_t step) const {
  return (ckpt_.every > 0 && ((step + 1) % ckpt_.every == 0 || step + 1 == steps_)) || stop_;
}

void training_run::checkpoint_and_log(int64_t step, step_record& r) {
  if (checkpoint_due(step)) {
    try {
      save_checkpoint(step, r);
    } catch (...) {
      log(r);
      throw;
    }
  }
  log(r);
}

// Behind the next steps where the plan stages checkpoints (not with
// --checkpoint-sync), except the run's last, written at once: nothing
// follows it to hide the write behind. The step's stall is all the time
// spent here: completing the previous checkpoint (waiting for its write
// first), staging this one or writing it.
void training_run::save_checkpoint(int64_t step, step_record& r) {
  const checkpoint_state state{step + 1,
                               c_.sequence_base + (step + 1) * checkpoint_sequences_per_step(p_),
                               scaler_,
                               guard_window_losses(guard_),
                               guard_window_norms(guard_),
                               guard_.skips_in_row,
                               seed_,
                               dataloader_describe(data_),
                               run_};
  const auto t = std::chrono::steady_clock::now();
  auto since_t = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  finish_pending_checkpoint();
  const bool last = stop_ || step + 1 == steps_;
  if (ckpt_writer_ && !last) {
    staged_s_ = ckpt_writer_->start(
        c_, ckpt_, state, [&](int buffer, std::byte* to) { b_->copy_to_host(c_, buffer, to); });
    r.checkpoint_stall_s = staged_stall_s_ = since_t();
    return;
  }
  checkpoint_saved saved;
  b_->with_host_weights(c_, false, [&] { saved = checkpoint_save(c_, ckpt_, state); });
  r.checkpoint_stall_s = since_t();
  if (!lead_) return;
  ckpt_lines_ += fmt::format("checkpoint: step {} written to {} ({:.2f} MiB in {:.2f} s{})\n",
                             step + 1, saved.path, mib(saved.bytes), r.checkpoint_stall_s,
                             saved.removed ? fmt::format(", {} older removed", saved.removed) : "");
}

void training_run::finish_pending_checkpoint() {
  if (!ckpt_writer_ || !ckpt_writer_->pending()) return;
  const int64_t step = ckpt_writer_->pending_step();
  const checkpoint_saved saved = ckpt_writer_->finish(c_);
  if (!lead_) return;
  ckpt_lines_ += fmt::format(
      "checkpoint: step {} written to {} ({:.2f} MiB in {:.2f} s behind the next steps{}; staged "
      "in {:.3f} s, the step stalled {:.3f} s)\n",
      step, saved.path, mib(saved.bytes), saved.write_s,
      saved.removed ? fmt::format(", {} older removed", saved.removed) : "", staged_s_,
      staged_stall_s_);
}

void training_run::finish_checkpoints() {
  finish_pending_checkpoint();
  if (!ckpt_lines_.empty()) std::fputs(ckpt_lines_.c_str(), stdout);
  ckpt_lines_.clear();
}

void training_run::print_stopped(int64_t step) const {
  if (!lead_) return;
  if (!guard_stop_.empty()) {
    std::printf(
        "stopped after step %lld of %lld: %s; the checkpoint written now holds the weights as "
        "they were before those steps and resumes after them (the spike lines above name their "
        "rows); continue with: %s\n",
        static_cast<long long>(step + 1), static_cast<long long>(steps_), guard_stop_.c_str(),
        run_settings_resume_command(li_.launcher, li_.relaunched, p_.parallel.world, o_.binary,
                                    ckpt_.dir)
            .c_str());
    return;
  }
  std::printf(
      "stopped after step %lld of %lld: asked to by a signal (SIGUSR1 or SIGTERM); continue "
      "with: %s\n",
      static_cast<long long>(step + 1), static_cast<long long>(steps_),
      run_settings_resume_command(li_.launcher, li_.relaunched, p_.parallel.world, o_.binary,
                                  ckpt_.dir)
          .c_str());
}

void training_run::close_metrics() {
  metrics_.reset();
}

void training_run::print_summary() const {
  const std::string memory_lines = memory_report(memory_, p_, b_->warmup_steps(), lead_);
  if (lead_ && totals_.steps_run > 0)
    run_log_summary(totals_, tokens_per_step_, memory_lines, scaler_);
}

int64_t training_run::trace_step() const {
  return o_.trace_step >= 0 ? o_.trace_step
                            : start_step_ + std::min<int64_t>(2, steps_ - start_step_ - 1);
}

std::string training_run::write_trace() const {
  const int64_t step = trace_step();
  if (o_.trace.empty() || step < start_step_ || step >= start_step_ + totals_.steps_run) return "";
  return gather_and_write_trace(
      p_, o_.trace, step, trace_start_ns_, trace_end_ns_,
      {trace_loss_, totals_.validated ? last_val_.step : -1, last_val_.loss}, lead_);
}

void training_run::save_weights() {
  if (run_.save.empty()) return;
  if (stop_) {
    if (lead_)
      std::printf(
          "not writing %s: the run stopped before its last step (the checkpoint has "
          "the weights: fsdpgen merge)\n",
          run_.save.c_str());
    return;
  }
  b_->with_host_weights(c_, false,
                        [&] { weights_save(c_, run_.save, start_step_ + totals_.steps_run); });
  if (lead_)
    std::printf("saved %s (%s params, F32, Hugging Face %s names)\n", run_.save.c_str(),
                with_commas(p_.model.params).c_str(), hf_family_name(p_));
}

void training_run::finish() {
  b_->stop();
  comm_destroy(c_.comms);
}

// Collective: the manifest of the checkpoint --resume names (an agreed
// error when any rank cannot read it); empty without --resume.
checkpoint_manifest read_resumed_manifest(const std::string& resume_from) {
  checkpoint_manifest m;
  if (resume_from.empty()) return m;
  std::string error;
  try {
    m = checkpoint_manifest_read(resume_from);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "resuming from a checkpoint");
  return m;
}

// The run as launched: `launched` (the flags over the spec), or resumed, the
// checkpoint's record (in its manifest m) with the flags given over it
// (collective: the warnings print on rank 0, a changed global batch not
// allowed is an error on every rank).
checkpoint_run resolve_run(const program& p, const options& o, const checkpoint_run& launched,
                           const std::string& resume_from, const checkpoint_manifest& m,
                           bool lead) {
  if (resume_from.empty()) return launched;
  if (!m.has_run) {
    if (lead)
      std::printf(
          "note: %s records no run (written before fsdpgen recorded runs): this run's "
          "flags and the spec's values apply\n",
          resume_from.c_str());
    return launched;
  }
  const run_resumed r =
      run_settings_resume(p, o.run, m.run, m.world, m.step, o.allow_batch_change, o.binary);
  agree_on_error(r.batch_problem.empty() ? "" : fmt::format("{}: {}", resume_from, r.batch_problem),
                 "resuming from a checkpoint");
  if (lead) {
    if (!r.taken.empty())
      std::printf("resume: the run as launched, from the checkpoint: %s\n",
                  fmt::format("{}", fmt::join(r.taken, " ")).c_str());
    for (const std::string& w : r.warnings)
      std::printf("warning: %s\n", w.c_str());
  }
  return r.run;
}

int run(const program& p, const options& o, const launch_info& li, const backend_kind& kind) {
  const bool lead = li.rank == 0;
  const checkpoint_run launched = run_settings_of(p, o.run);
  // Without a value, --resume looks in the checkpoint directory of the flags or the spec.
  const std::string resume_from = o.resume ? resume_path(o, launched.checkpoint_dir, lead) : "";
  const checkpoint_manifest resumed = read_resumed_manifest(resume_from);
  const checkpoint_run settled = resolve_run(p, o, launched, resume_from, resumed, lead);
  training_run t(p, o, settled, resume_from, resumed, li);
  t.check_outputs();
  t.set_up(kind);
  // After the arena is made: its thread's first pages are not the arena's
  // growth the memory report measures.
  const std::unique_ptr<watchdog> watch =
      o.no_watchdog ? nullptr
                    : watchdog_start(p, o.watch, li.rank, li.world, li.local_size,
                                     settled.checkpoint_dir, settled.checkpoint_every > 0);
  t.load_weights();
  t.print_banner();
  t.open_metrics();
  for (int64_t step = t.first_step(); step < t.steps(); ++step) {
    step_record r = t.train_step(step);
    if (t.validation_due(step + 1)) r.validated = true, r.val_loss = t.validate(step + 1).loss;
    t.checkpoint_and_log(step, r);
    if (t.stop_requested()) {
      t.print_stopped(step);
      break;
    }
  }
  t.finish_checkpoints();
  t.validate_untrained();
  t.close_metrics();
  t.print_summary();
  // Agreed on only after the weights are saved, which a failed trace must not prevent.
  const std::string trace_error = t.write_trace();
  t.save_weights();
  std::fflush(stdout);
  agree_on_error(trace_error, "writing the trace");
  t.finish();
  return t.exit_status();
}

// What escaped train() (`what`, nullptr for no std::exception), as one line
// with "rank N: " once MPI is up; with several ranks MPI_Abort, so that none
// waits in a collective for this one. The exit status. Allocates nothing.
int escaped(const char* what) {
  int initialized = 0, finalized = 0, rank = -1, world = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  const bool mpi = initialized && !finalized;
  if (mpi) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    std::fprintf(stderr, "rank %d: ", rank);
  }
  if (what)
    std::fprintf(stderr, "error: %s\n", what);
  else
    std::fprintf(stderr, "internal error: an exception that is not a std::exception\n");
  std::fflush(stderr);
  if (mpi && world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  if (mpi) MPI_Finalize();
  return 1;
}

// The flags, the launch and the run; train_main catches what escapes.
int train(const program& p, int argc, char** argv, const backend_kind& kind) {
  launch_prefer_passive_openmp(argv);
  CLI::App app{fmt::format("Trains {} as planned by fsdpgen from {}.", p.model_name, p.spec_path)};
  options o;
  app.add_option("--steps", o.run.steps, "training steps (default: the spec's)")
      ->check(whole_number(0));
  app.add_option("--data", o.run.data,
                 "synthetic, a text file, or llm.c .bin token files and quoted glob patterns "
                 "(uint16 GPT-2 or uint32 Llama 3 tokens), read as one stream in the order given");
  app.add_option("--val", o.run.val, "validation data, as --data (default: the spec's val)");
  app.add_option("--val-every", o.run.val_every,
                 "steps between validations, also run at checkpoints and at the end (0: none; "
                 "default: the spec's val_every)")
      ->check(whole_number(0));
  app.add_option("--val-sequences", o.run.val_sequences,
                 "sequences each validation reads from the start of the validation data "
                 "(default: the spec's val_sequences)")
      ->check(whole_number(1));
  app.add_option("--shuffle", o.run.shuffle,
                 "true: each epoch reads the training sequences in a seeded order; false: in "
                 "file order (default: the spec's shuffle)")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--init-from", o.init_from,
                 "load weights (Hugging Face names) from a .safetensors file, a model directory "
                 "(sharded or not; its config.json is checked) or its index file");
  app.add_option("--save", o.run.save,
                 fmt::format("write the final weights as safetensors (Hugging Face {} names)",
                             hf_family_name(p)));
  CLI::Option* resume =
      app.add_option("--resume", o.resume_from,
                     "continue the run a checkpoint holds (its steps, data, validation, "
                     "checkpoints and outputs as launched; a flag given overrides one, with a "
                     "warning where that changes the run): a step_N directory, a directory of "
                     "them (its newest), or without a value the newest in the checkpoint "
                     "directory")
          ->expected(0, 1);
  app.add_flag("--allow-batch-change", o.allow_batch_change,
               "with --resume: continue although this binary's global batch (world x "
               "micro-batch x micro-batches) is not the checkpoint's run's");
  app.add_option("--checkpoint-every", o.run.checkpoint_every,
                 "steps between checkpoints, also written at the end (0: none; default: the "
                 "spec's checkpoint(every))")
      ->check(whole_number(0));
  app.add_option("--checkpoint-dir", o.run.checkpoint_dir,
                 "where checkpoints go (default: the spec's)");
  app.add_option("--checkpoint-keep", o.run.checkpoint_keep,
                 "newest checkpoints kept (default: the spec's keep)")
      ->check(whole_number(1));
  app.add_flag("--no-watchdog", o.no_watchdog,
               "run without the watchdog: a stalled rank then hangs the job until the scheduler "
               "ends it (for measuring the watchdog's cost: tests/bench/reliability/run.sh)");
  app.add_flag("--checkpoint-sync", o.checkpoint_sync,
               "write each checkpoint before the next step starts (default where the spec plans "
               "checkpoints: copy it into the plan's checkpoint staging buffer and write it "
               "behind the next steps; the files are the same)");
  app.add_option("--trace", o.trace, "write the measured timeline of one step (Chrome trace)");
  app.add_option("--trace-step", o.trace_step, "the 0-based step to trace (default 2)")
      ->check(whole_number(0));
  app.add_option("--straggler-every", o.straggler_every,
                 "every N steps (not the traced one), time every op on every rank and name the "
                 "busiest rank and the op kind where it lost most against the median rank: in "
                 "--metrics, and in the log where it took 10% longer (0: never; default 100)")
      ->check(whole_number(0));
  app.add_flag("--print-schedule", o.print_schedule, "print the static schedule and exit");
  app.add_option("--seed", o.seed, "initialization seed (default: the spec's)")
      ->check(whole_number(0));
  app.add_option("--log-every", o.run.log_every, "log every N steps (default: the spec's)")
      ->check(whole_number(1));
  app.add_option("--metrics", o.run.metrics, "write one JSON line per step (rank 0)");
  app.add_option("--inject-overflow", o.inject_overflow,
                 "testing aid: make every gradient of this 0-based step non-finite, as an fp16 "
                 "overflow would (the step is skipped and an fp16 loss scale backs off)")
      ->check(whole_number(0));
  app.add_option("--inject-spike", o.inject_spike,
                 fmt::format("testing aid: multiply the loss and its gradient in this 0-based "
                             "step by {:g} on every rank, as a bad batch would (the loss-spike "
                             "guard leaves the step out); repeat it for more steps",
                             kInjectedSpikeFactor))
      ->check(whole_number(0));
  app.add_option("--inject-leak", o.inject_leak_bytes,
                 "testing aid: every step allocates this many bytes on the heap and keeps them, "
                 "which the memory report must show")
      ->check(whole_number(0));
  app.add_option("--inject-grad-scale", o.inject_grad_scale,
                 "testing aid: at world > 1, multiply every gradient by this factor unknown to "
                 "the optimizer, as a wrong average across ranks would")
      ->check(positive_number());
  app.add_option("--inject-stall", o.inject_stall,
                 "testing aid: RANK:STEP:SECONDS: that rank sleeps this long in its first compute "
                 "op of this 0-based step, as a stuck rank would (the watchdog reports it past "
                 "--stall-timeout)");
  o.watch.stall_timeout_s = p.train.stall_timeout_s;
  app.add_option("--stall-timeout", o.watch.stall_timeout_s,
                 fmt::format("seconds an op may run before the watchdog reports a stall, naming "
                             "the rank, op and step, and every rank exits with code 3 (default: "
                             "the spec's stall_timeout, {:g})",
                             p.train.stall_timeout_s))
      ->check(positive_number());
  app.add_option("--watch-dir", o.watch.watch_dir,
                 "where the watchdog makes the job's directory of rank records, visible to every "
                 "rank (default: /dev/shm when every rank is on this node, else the checkpoint "
                 "directory's parent)");
  app.add_option("--trace-data", o.trace_data,
                 "testing aid: every rank appends to this file one line per sequence it reads, "
                 "training or validating: where it came from and a hash of its tokens "
                 "(runtime/data.h data_trace)");
  bool no_graph = false;
  if (kind.cuda_flags) {
    app.add_option("--comm", o.backend.comm,
                   "nccl (default), or mpi-test: collectives over MPI from host staging buffers, "
                   "a test mode for several ranks sharing one GPU")
        ->check(CLI::IsMember({"nccl", "mpi-test"}));
    app.add_flag("--no-graph", no_graph, "issue every step eagerly (no CUDA graph)");
    app.add_option("--profile-step", o.backend.profile_step,
                   "bracket this 0-based step with cudaProfilerStart/Stop, so that `ncu "
                   "--profile-from-start off` measures exactly one step's kernels")
        ->check(whole_number(0));
  } else {
    app.add_option("--inject-arena-bytes", o.backend.arena_extra_bytes,
                   "testing aid: allocate the arena this many bytes larger than planned, which "
                   "the memory report and the memory tests must show")
        ->check(whole_number(0));
  }
  // The weights (and the seed that made them) come from the checkpoint.
  resume->excludes("--init-from");
  resume->excludes("--seed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "error: %s (--help lists the flags)\n",
                 flag_error_message(app, e).c_str());
    return 2;
  }
  o.backend.graphs = !no_graph;
  o.binary = argv[0];
  o.resume = resume->count() > 0;
  if (o.print_schedule) {
    std::fputs(p.schedule_text, stdout);
    return 0;
  }
  const int64_t run_steps = o.run.steps >= 0 ? o.run.steps : p.train.steps;
  for (auto [flag, step] : {std::pair{"--trace-step", o.trace_step},
                            std::pair{"--profile-step", o.backend.profile_step}})
    if (step >= 0 && step >= run_steps) {
      std::fprintf(stderr,
                   "error: %s %lld is not below the number of steps: the run has %lld step%s, "
                   "numbered from 0\n",
                   flag, static_cast<long long>(step), static_cast<long long>(run_steps),
                   run_steps == 1 ? "" : "s");
      return 2;
    }
  watch_injected_stall stall;
  if (!o.inject_stall.empty()) {
    const std::string why = watch_parse_injected_stall(o.inject_stall, p.parallel.world, stall);
    if (!why.empty()) {
      std::fprintf(stderr, "error: --inject-stall: %s (--help lists the flags)\n", why.c_str());
      return 2;
    }
  }
  launch_info li = launch_init(p, argc, argv);
  install_stop_handlers();
  if (li.rank == stall.rank) {
    watch_process_status().inject_stall_step = stall.step;
    watch_process_status().inject_stall_seconds = stall.seconds;
  }
  int status = 0;
  try {
    status = run(p, o, li, kind);
  } catch (const agreed_error& e) {
    if (e.own || li.rank == 0)
      std::fprintf(stderr, "rank %lld: error: %s\n", static_cast<long long>(li.rank), e.what());
    launch_finalize();
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %lld: error: %s\n", static_cast<long long>(li.rank), e.what());
    std::fflush(stderr);
    if (li.world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
    launch_finalize();
    return 1;
  }
  launch_finalize();
  return status;
}

}  // namespace

int train_main(const program& p, int argc, char** argv, const backend_kind& kind) {
  try {
    return train(p, argc, argv, kind);
  } catch (const std::exception& e) {
    return escaped(e.what());
  } catch (...) {
    return escaped(nullptr);
  }
}
