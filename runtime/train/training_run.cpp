// training_run: a run's set-up, its weights, its banner and its end
// (runtime/train/training_run.h).
#include "runtime/train/training_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "runtime/comm.h"
#include "runtime/human.h"
#include "runtime/init.h"
#include "runtime/rope.h"
#include "runtime/train/run_settings.h"
#include "runtime/train/stop_signal.h"
#include "runtime/weights.h"

training_run::training_run(const program& p, const train_options& o, const checkpoint_run& run,
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
      tokens_per_step_(program_global_batch(p) * p.model.context),
      val_every_(run.val_every),
      val_sequences_(run.val_sequences),
      guard_(guard_start(p.train.guard)) {}

void training_run::set_up(const backend_kind& kind) {
  c_.p = &p_;
  open_samples();  // before the backend, so that set-up's memory beside the arena leaves it out
  b_ = kind.make(p_);
  open_data();
  open_eval();
  c_.comms = comm_create(p_.parallel.shard_group);
  inputs_.data = &data_;
  inputs_.val = &val_;
  c_.inputs = &inputs_;
  decay_ = optimizer_decay_ranges(p_, c_.comms.shard_rank);
  c_.decay_ranges = decay_.pointers.data();
  c_.decay_range_counts = decay_.counts.data();
  std::string error;
  try {
    if (p_.train.optimizer.kind == optimizer_kind::muon) {
      muon_ = muon_layout_of(p_, c_.comms.shard_rank, decay_);
      c_.muon = &muon_;
    }
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

void training_run::print_banner() const {
  if (!lead_) return;
  std::string data = dataloader_describe(data_);
  if (const int64_t W = dataloader_sequences(data_); W > 0) {
    const int64_t next = c_.sequence_base + start_step_ * program_global_batch(p_);
    const double epochs = static_cast<double>(steps_ - start_step_) *
                          static_cast<double>(program_global_batch(p_)) / static_cast<double>(W);
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
  run_log_banner(
      p_, {li_.launcher, b_->describe(), data, val, weights_from_, steps_, start_step_, o_.resume,
           tokens_per_step_, ckpt_, written, placement_banner(li_.where, launch_plan(p_))});
  if (const std::string note = optimizer_warmup_note(p_, steps_); !note.empty())
    std::printf("warning: %s\n", note.c_str());
  if (sampler_) std::printf("%s\n", samples_banner().c_str());
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
  // Rank 0 names the signal it received; the ranks agree only that one came.
  const std::string signal = *stop_signal_name()
                                 ? fmt::format("asked to by {}", stop_signal_name())
                                 : std::string("asked to by a stop signal to another rank");
  std::printf("stopped after step %lld of %lld: %s; continue with: %s\n",
              static_cast<long long>(step + 1), static_cast<long long>(steps_), signal.c_str(),
              run_settings_resume_command(li_.launcher, li_.relaunched, p_.parallel.world,
                                          o_.binary, ckpt_.dir)
                  .c_str());
}

void training_run::finish() {
  b_->stop();
  comm_destroy(c_.comms);
}
