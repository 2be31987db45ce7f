// train: the generated binary's main loop, the same for every target. Parses
// the binary's flags (runtime/train/train_flags.h), launches, and runs a
// training_run (runtime/train/training_run.h): sets up communicators, data, the
// backend (runtime/backend.h: arena and executor) and weights, runs the
// planned step `steps` times, logs (runtime/train/run_log.h) and writes
// checkpoints, weights, metrics and the trace. run() lists a run's steps in
// order.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "runtime/backend.h"
#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/launch.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/run_settings.h"
#include "runtime/train/stop_signal.h"
#include "runtime/train/train_flags.h"
#include "runtime/train/training_run.h"
#include "runtime/train/watchdog.h"

namespace {

// --resume-if-exists decided by what resume_path found (resume_from): a
// --resume of that checkpoint (whose weights and seed then count: --init-from
// and --seed are not used, with a note), or, with none, a fresh run.
train_options resume_decided(const train_options& given, const std::string& resume_from,
                             const checkpoint_run& launched, bool lead) {
  train_options o = given;
  if (!o.resume_if_exists) return o;
  o.resume = !resume_from.empty();
  if (!o.resume) {
    if (lead)
      std::printf("--resume-if-exists: no checkpoint in %s, so the run starts afresh\n",
                  launched.checkpoint_dir.c_str());
    return o;
  }
  if (lead && (!o.init_from.empty() || o.seed >= 0))
    std::printf(
        "note: --resume-if-exists resumes from the checkpoint in %s, which holds the weights and "
        "the seed: --init-from and --seed are not used\n",
        launched.checkpoint_dir.c_str());
  o.init_from.clear();
  o.seed = -1;
  return o;
}

int run(const program& p, const train_options& given, const launch_info& li,
        const backend_kind& kind) {
  const bool lead = li.rank == 0;
  const checkpoint_run launched = run_settings_of(p, given.run);
  // Without a value, --resume (and --resume-if-exists) look in the checkpoint
  // directory of the flags or the spec.
  const std::string resume_from = given.resume || given.resume_if_exists
                                      ? resume_path(given, launched.checkpoint_dir, lead)
                                      : "";
  const train_options o = resume_decided(given, resume_from, launched, lead);
  const checkpoint_manifest resumed = read_resumed_manifest(resume_from);
  const checkpoint_run settled = resolve_run(p, o, launched, resume_from, resumed, lead);
  training_run t(p, o, settled, resume_from, resumed, li);
  check_outputs(t.shape, t.checkpoints.config);
  training_set_up(t, kind);
  // After the arena is made: its thread's first pages are not the arena's
  // growth the memory report measures.
  const std::unique_ptr<watchdog> watch =
      o.no_watchdog
          ? nullptr
          : watchdog_start(p, o.watch, li.rank, li.world, li.local_size, settled.checkpoint_dir,
                           settled.checkpoint_every > 0, checkpoint_shard_bytes(p));
  training_load_weights(t);
  training_print_banner(t);
  t.outputs.open_metrics(t.shape, t.progress.start_step);
  for (int64_t step = t.progress.start_step; step < t.shape.steps; ++step) {
    step_record r = training_step(t, step);
    if (training_validation_due(t, step + 1))
      r.validated = true, r.val_loss = training_validate(t, step + 1).loss;
    if (training_eval_due(t, step + 1)) r.eval = training_evaluate(t, step + 1);
    if (training_samples_due(t, step + 1)) r.samples = training_sample(t, step + 1);
    training_checkpoint_and_log(t, step, r);
    if (t.progress.stop) {
      training_print_stopped(t, step);
      break;
    }
  }
  training_finish_checkpoints(t);
  training_validate_untrained(t);
  training_evaluate_untrained(t);
  t.outputs.close_metrics();
  t.outputs.print_summary(t.shape, *t.machine.b, t.progress.scaler);
  // Agreed on only after the weights are saved, which a failed trace must not prevent.
  const std::string trace_error =
      t.outputs.write_trace(t.shape, t.progress.start_step, t.validation.last);
  save_weights(t.shape, t.machine.c, *t.machine.b, t.data.data,
               t.progress.start_step + t.outputs.totals.steps_run, t.progress.stop);
  std::fflush(stdout);
  agree_on_error(trace_error, "writing the trace");
  training_finish(t);
  return t.progress.exit_status();
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
// Failures every rank reaches together (bad flags, and the agreed errors of
// set-up, resume and the steps: runtime/comm.h agree_on_error) are said once
// by rank 0, and every rank finalizes MPI and exits with the same status;
// any other failure aborts the job (MPI_Abort), since other ranks may be
// waiting in a collective.
int train(const program& p, int argc, char** argv, const backend_kind& kind) {
  launch_prefer_passive_openmp(argv);
  train_options o;
  std::string flag_error;
  if (const std::optional<int> exit_now = train_flags_parse(p, argc, argv, kind, o, flag_error)) {
    // Ranks an MPI launcher started agree on their flags below, each message said once.
    if (flag_error.empty() || !launch_under_mpi_launcher()) {
      if (!flag_error.empty()) std::fprintf(stderr, "error: %s\n", flag_error.c_str());
      return *exit_now;
    }
  }
  launch_info li = launch_init(p, argc, argv);
  try {
    agree_on_error(flag_error, "reading the flags");
  } catch (const agreed_error& e) {
    std::fputs(e.report.c_str(), stderr);
    launch_finalize();
    return 2;
  }
  // The same verdict on every rank (the placement is gathered), said once.
  if (const std::string why = placement_check(li.where, launch_plan(p), o.binary); !why.empty()) {
    if (!o.allow_placement) {
      if (li.rank == 0)
        std::fprintf(stderr, "error: %s; --allow-placement runs it as placed\n", why.c_str());
      launch_finalize();
      return 2;
    }
    if (li.rank == 0)
      std::fprintf(stderr, "warning: %s; running as placed (--allow-placement)\n", why.c_str());
  }
  stop_signal_install();
  if (li.rank == o.stall.rank) {
    watch_process_status().inject_stall_step = o.stall.step;
    watch_process_status().inject_stall_seconds = o.stall.seconds;
  }
  int status = 0;
  try {
    status = run(p, o, li, kind);
  } catch (const agreed_error& e) {
    std::fputs(e.report.c_str(), stderr);  // rank 0's: every rank's message, each once
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
