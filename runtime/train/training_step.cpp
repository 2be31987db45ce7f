// training_step: one training step as the loop runs it: the gradients'
// scale, the step, the loss all ranks agree on, the loss-spike guard, and the
// step's totals and log lines (runtime/train/training_run.h).
#include "runtime/train/training_run.h"

#include <mpi.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/allocations.h"
#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/trace.h"
#include "runtime/train/stop_signal.h"
#include "runtime/train/watchdog.h"

namespace {

// --inject-leak: heap bytes allocated, touched and never freed, as a step
// that leaked would.
void leak(int64_t bytes) {
  static std::vector<std::unique_ptr<char[]>> kept;
  kept.emplace_back(new char[static_cast<size_t>(bytes)]);
  std::memset(kept.back().get(), 1, static_cast<size_t>(bytes));
}

}  // namespace

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
  const int64_t per_step = program_global_batch(p_);
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
  const double mine[4] = {loss_sum, stop_signal_received() ? 1.0 : 0.0, bad ? 1.0 : 0.0,
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
  if (lead_ && r.eval) run_log_eval(*r.eval, steps_);
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
