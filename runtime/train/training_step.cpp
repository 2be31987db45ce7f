// training_step: one training step as the loop runs it: the gradients'
// scale, the step, the loss all ranks agree on, the loss-spike guard, the
// step's totals, its checkpoint and its log lines (runtime/train/training_run.h).
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

// Every --straggler-every steps at world > 1, but not the traced step: its
// times are the trace's alone.
bool straggler_due(const run_shape& s, int64_t step, bool traced) {
  return s.o.straggler_every > 0 && s.p.parallel.world > 1 &&
         (step + 1) % s.o.straggler_every == 0 && !traced;
}

// The loss scaler's scale for the step's gradients, and the testing aids'.
void scale_gradients(const run_shape& s, const loss_scaler& scaler, step_context& c, int64_t step) {
  const train_options& o = s.o;
  const double grad_scale = loss_scaler_grad_scale(scaler);
  c.grad_scale = static_cast<float>(grad_scale);
  c.dloss_scale = static_cast<float>(grad_scale / s.tokens_per_step);
  // As a wrong average across ranks would: every gradient scaled, unknown to the optimizer.
  if (s.p.parallel.world > 1) c.dloss_scale *= static_cast<float>(o.inject_grad_scale);
  // As an fp16 overflow would: every gradient of this step becomes non-finite.
  if (step == o.inject_overflow) c.dloss_scale = std::numeric_limits<float>::infinity();
  // As a bad batch would: its losses and gradients many times the others'.
  const bool spike =
      std::find(o.inject_spike.begin(), o.inject_spike.end(), step) != o.inject_spike.end();
  c.inject_loss_factor = spike ? static_cast<float>(kInjectedSpikeFactor) : 1.0f;
  if (spike) c.dloss_scale *= static_cast<float>(kInjectedSpikeFactor);
  c.optimizer_step = scaler.applied_steps + 1;
}

// What the ranks agreed on after a step.
struct agreed_loss {
  double loss_sum = 0;          // over every rank
  bool data_error = false;      // some rank found a bad token id in this step's batch
  std::string data_error_text;  // ...this one, if it did
};

// The loss summed over every rank; with it, which stop signals reached how
// many ranks (t.progress.stop, and its reason) and how many ranks found a bad
// token id in their batch.
agreed_loss agree_on_loss(training_run& t, double loss_sum, bool skipped) {
  const program& p = t.shape.p;
  agreed_loss a;
  a.data_error_text = dataloader_take_error(t.data.data);
  const bool bad = !a.data_error_text.empty();
  constexpr int kSignalsAt = 3;  // where the stop signals' counts start
  constexpr int n = kSignalsAt + kStopSignals;
  double mine[n] = {loss_sum, bad ? 1.0 : 0.0, skipped ? 1.0 : 0.0};
  stop_signal_count(mine + kSignalsAt);
  double all[n] = {};
  {
    const watch_outside_step watched(kWatchLossAllReduce, trace_clock_ns());
    MPI_CHECK(MPI_Allreduce(mine, all, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  }
  t.progress.stop_signal = stop_signal_agreed(all + kSignalsAt, p.parallel.world);
  t.progress.stop = !t.progress.stop_signal.empty();
  a.data_error = all[1] > 0;
  // Every rank's gate saw the same all-reduced values; one that did not would
  // leave the shards of one model at two different steps.
  if (all[2] > 0 && all[2] < static_cast<double>(p.parallel.world))
    throw std::runtime_error(fmt::format(
        "step {}: {} of {} ranks skipped the optimizer step and the others applied it (the "
        "ranks' gradient norms or losses differ): the shards would hold two different models",
        t.machine.c.step + 1, all[2], p.parallel.world));
  a.loss_sum = all[0];
  return a;
}

// The loss-spike guard after a step: a spike is logged with its data and
// counted; max_skips in a row stop the run with a checkpoint. Outside fp16
// loss scaling, a loss or norm that is not finite stops the run at once (no
// checkpoint: the last one stays the newest).
void guard_step(training_run& t, step_record& r, const step_result& result) {
  const run_shape& s = t.shape;
  training_progress& at = t.progress;
  const step_context& c = t.machine.c;
  r.spike = result.spike;
  if (!at.scaler.enabled && (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))) {
    // The rank whose own rows gave a non-finite loss says so; else rank 0
    // names every rank's rows.
    const bool mine = !std::isfinite(result.loss_sum);
    std::string why;
    if (mine || s.lead)
      why = fmt::format(
          "step {}: the {} is not finite ({}) without fp16 loss scaling: the step was not applied "
          "and the run stops (the last checkpoint is kept as it was); {}",
          r.step + 1, std::isfinite(r.loss) ? "gradient norm" : "loss",
          std::isfinite(r.loss) ? r.grad_norm : r.loss,
          mine ? fmt::format("this rank's loss over its rows is {}:\n{}", result.loss_sum,
                             t.data.rows_of_rank(s.p, c.sequence_base, r.step, s.li.rank))
               : fmt::format("the step's rows:\n{}",
                             t.data.rows_of_step(s.p, c.sequence_base, r.step)));
    agree_on_error(why, "guarding against a non-finite loss");
  }
  if (!guard_enabled(at.guard)) return;
  run_totals& totals = t.outputs.totals;
  totals.skipped_spike += r.spike;
  r.skipped_spike = totals.skipped_spike;
  const bool too_many = guard_after_step(at.guard, !r.skipped, r.spike, r.loss, r.grad_norm);
  if (r.spike && s.lead) {
    const guard_limits limits{c.loss_total_limit / static_cast<double>(s.tokens_per_step),
                              c.norm_limit};
    t.outputs.lines += fmt::format(
        "spike: step {} not applied (the loss-spike guard): loss {:.6f} (limit {:.6f}), gradient "
        "norm {:.4f} (limit {:.4f}); {} in a row (max_skips {}). Its rows:\n{}",
        r.step + 1, r.loss, limits.loss, r.grad_norm, limits.norm, at.guard.skips_in_row,
        at.guard.g.max_skips, t.data.rows_of_step(s.p, c.sequence_base, r.step));
  }
  if (too_many && at.guard_stop.empty()) {
    at.stop = true;
    at.guard_stop = fmt::format(
        "the loss-spike guard left out {} steps in a row (steps {} to {}, max_skips {})",
        at.guard.skips_in_row, r.step + 2 - at.guard.skips_in_row, r.step + 1,
        at.guard.g.max_skips);
  }
}

}  // namespace

step_record training_step(training_run& t, int64_t step) {
  const run_shape& s = t.shape;
  const program& p = s.p;
  training_progress& at = t.progress;
  step_context& c = t.machine.c;
  backend& b = *t.machine.b;
  training_outputs& out = t.outputs;
  const dataloader& data = t.data.data;
  if (step == at.start_step) out.run_start = std::chrono::steady_clock::now();
  step_record r;
  r.step = step;
  r.lr = optimizer_lr(p, step, s.steps);
  r.loss_scale = at.scaler.scale;
  scale_gradients(s, at.scaler, c, step);
  const guard_limits limits = guard_limits_of(at.guard);
  c.norm_limit = static_cast<float>(limits.norm);
  c.loss_total_limit = static_cast<float>(limits.loss * static_cast<double>(s.tokens_per_step));
  const bool traced = !s.o.trace.empty() && step == trace_step(s, at.start_step);
  const bool straggler = straggler_due(s, step, traced);
  const auto t0 = std::chrono::steady_clock::now();
  allocations_count(step - at.start_step >= b.warmup_steps());
  const step_result result = b.run_step(step, r.lr, traced || straggler);
  if (s.o.inject_leak_bytes > 0) leak(s.o.inject_leak_bytes);
  allocations_count(false);
  const agreed_loss agreed = agree_on_loss(t, result.loss_sum, result.skipped);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (agreed
          .data_error)  // a batch held a token id >= vocab: every rank stops, its finder says where
    agree_on_error(agreed.data_error_text, "reading the training data");
  r.loss = agreed.loss_sum / static_cast<double>(s.tokens_per_step);
  r.tokens_per_s = static_cast<double>(s.tokens_per_step) / r.seconds;
  const int64_t per_step = program_global_batch(p);
  const int64_t first = c.sequence_base + step * per_step;
  r.epoch = dataloader_epoch(data, first);
  const int64_t last_epoch = dataloader_epoch(data, first + per_step - 1);
  if (s.lead && step > at.start_step && last_epoch > dataloader_epoch(data, first - 1))
    std::printf("data: epoch %lld begins within step %lld (every sequence of epoch %lld read)\n",
                static_cast<long long>(last_epoch + 1), static_cast<long long>(step + 1),
                static_cast<long long>(last_epoch));
  r.grad_norm = result.grad_norm;
  r.skipped = result.skipped;
  // A spike's gradients were finite: the loss scale stays as it was.
  if (!result.spike) loss_scaler_update(at.scaler, r.skipped);
  guard_step(t, r, result);
  r.machine = b.read_memory();
  memory_watch_step(out.memory, r.machine);
  out.count(r, at.start_step);
  if (traced) {
    out.trace_start_ns = b.op_start_ns(), out.trace_end_ns = b.op_end_ns();
    out.trace_loss = r.loss;
  }
  if (straggler) r.straggler = out.stragglers->measure(p, b.op_start_ns(), b.op_end_ns());
  return r;
}

void training_checkpoint_and_log(training_run& t, int64_t step, step_record& r) {
  const run_shape& s = t.shape;
  const training_progress& at = t.progress;
  auto log = [&] { t.outputs.log(s, r, at.start_step, at.scaler, t.validation.last); };
  if (t.checkpoints.due(step, s.steps, at.stop)) {
    try {
      const checkpoint_state state{
          step + 1,
          t.machine.c.sequence_base + (step + 1) * program_global_batch(s.p),
          at.scaler,
          guard_window_losses(at.guard),
          guard_window_norms(at.guard),
          at.guard.skips_in_row,
          at.seed,
          dataloader_describe(t.data.data),
          s.run};
      const bool last = at.stop || step + 1 == s.steps;
      r.checkpoint_stall_s =
          t.checkpoints.save(t.machine.c, *t.machine.b, state, last, s.lead, t.outputs.lines);
    } catch (...) {
      log();
      throw;
    }
  }
  log();
}

void training_finish_checkpoints(training_run& t) {
  t.checkpoints.finish_pending(t.machine.c, t.shape.lead, t.outputs.lines);
  if (!t.outputs.lines.empty()) std::fputs(t.outputs.lines.c_str(), stdout);
  t.outputs.lines.clear();
}
