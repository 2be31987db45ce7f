// training_checkpoints: a run's checkpoints: when they are due, their
// state, written at once or behind the next steps, and resuming from one:
// which checkpoint, its record of the run and what it restores
// (runtime/train/training_run.h).
#include "runtime/train/training_run.h"

#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "runtime/comm.h"
#include "runtime/human.h"
#include "runtime/train/run_settings.h"

std::string resume_path(const train_options& o, const std::string& checkpoint_dir, bool lead) {
  std::string path, error;
  if (lead) {
    try {
      if (!o.resume_if_exists)
        path = checkpoint_resolve(o.resume_from.empty() ? checkpoint_dir : o.resume_from);
      else if (const std::vector<std::string> all = checkpoint_list(checkpoint_dir); !all.empty())
        path = all.back();
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

checkpoint_run resolve_run(const program& p, const train_options& o, const checkpoint_run& launched,
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
  c_.sequence_base = resumed.sequences - start_step_ * program_global_batch(p_);
  weights_from_ = fmt::format("resumed from {} (step {}, {} sequences read)", path, start_step_,
                              with_commas(resumed.sequences));
  if (lead_ && resumed.data != dataloader_describe(data_))
    std::printf("note: the checkpoint was written reading %s; this run reads %s\n",
                resumed.data.c_str(), dataloader_describe(data_).c_str());
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
                               c_.sequence_base + (step + 1) * program_global_batch(p_),
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
