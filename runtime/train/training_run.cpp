// training_run: a run's set-up, its weights, its banner, what runs after a
// step (validation, evaluation, samples) and its end
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
#include "runtime/train/weights.h"

namespace {

// llama: the rotary tables, computed once into the plan's buffer.
void fill_rope_tables(training_run& t) {
  const program& p = t.shape.p;
  if (p.plan.rope_buffer < 0) return;
  const program_model& m = p.model;
  const int64_t D = m.head_size();
  step_context& c = t.machine.c;
  t.machine.b->with_host_weights(c, true, [&] {
    float* cos = step_buffer<float>(c, static_cast<int>(p.plan.rope_buffer));
    const int64_t half = m.context * (D / 2);
    rope_tables(
        cos, cos + half, m.context, D, m.rope.theta,
        {m.rope.factor, m.rope.low_freq, m.rope.high_freq, m.rope.original_context, m.rope.linear});
    // Gemma 3's local layers: their own base, unscaled (llama_rope_at's local_rope)
    if (m.rope.local_theta != 0)
      rope_tables(cos + 2 * half, cos + 3 * half, m.context, D, m.rope.local_theta, {});
  });
}

// The weights, the step, the loss scaler, the guard, the seed and the data
// position from the checkpoint --resume names.
void resume(training_run& t) {
  const run_shape& s = t.shape;
  training_progress& at = t.progress;
  step_context& c = t.machine.c;
  const std::string& path = s.resume_from;
  checkpoint_state resumed;
  t.machine.b->with_host_weights(c, true, [&] { resumed = checkpoint_load(c, path, s.resumed); });
  at.start_step = resumed.step;
  at.scaler = resumed.scaler;
  guard_restore(at.guard, resumed.guard_losses, resumed.guard_norms, resumed.guard_skips_in_row);
  at.seed = resumed.seed;
  dataloader_set_shuffle_seed(t.data.data, static_cast<uint64_t>(at.seed));
  c.sequence_base = resumed.sequences - at.start_step * program_global_batch(s.p);
  at.weights_from = fmt::format("resumed from {} (step {}, {} sequences read)", path, at.start_step,
                                with_commas(resumed.sequences));
  if (s.lead && resumed.data != dataloader_describe(t.data.data))
    std::printf("note: the checkpoint was written reading %s; this run reads %s\n",
                resumed.data.c_str(), dataloader_describe(t.data.data).c_str());
}

// After `steps_done` steps: was a checkpoint due after the last of them?
bool checkpoint_was_due(const training_run& t, int64_t steps_done) {
  return t.checkpoints.due(steps_done - 1, t.shape.steps, t.progress.stop);
}

}  // namespace

training_run::training_run(const program& p, const train_options& o, const checkpoint_run& run,
                           std::string resume_from, const checkpoint_manifest& resumed,
                           const launch_info& li)
    : shape(p, o, run, std::move(resume_from), resumed, li), checkpoints(run) {
  progress.guard = guard_start(p.train.guard);
  validation.every = run.val_every;
  validation.sequences = run.val_sequences;
}

void training_set_up(training_run& t, const backend_kind& kind) {
  const run_shape& s = t.shape;
  const program& p = s.p;
  training_machine& m = t.machine;
  m.c.p = &p;
  t.samples.open(s);  // before the backend, so that set-up's memory beside the arena leaves it out
  m.b = kind.make(p);
  t.data.open(s, t.validation.every, t.validation.sequences);
  t.eval.open(s);
  m.c.comms = comm_create(p.parallel.shard_group);
  m.c.inputs = &t.data.inputs;
  m.decay = optimizer_decay_ranges(p, m.c.comms.shard_rank);
  m.c.decay_ranges = m.decay.pointers.data();
  m.c.decay_range_counts = m.decay.counts.data();
  std::string error;
  try {
    if (p.train.optimizer.kind == optimizer_kind::muon) {
      m.muon = muon_layout_of(p, m.c.comms.shard_rank, m.decay);
      m.c.muon = &m.muon;
    }
    m.b->start(m.c, m.mem, s.o.backend);
  } catch (const std::exception& e) {
    error = e.what();
  }
  try {
    if (error.empty()) t.checkpoints.start_writer(p, s.o.checkpoint_sync);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "set-up");
  t.outputs.memory.settle_steps = std::max<int64_t>(1, m.b->warmup_steps());
  t.outputs.stragglers.emplace(p.parallel.world, s.lead);
}

void training_load_weights(training_run& t) {
  const run_shape& s = t.shape;
  training_progress& at = t.progress;
  fill_rope_tables(t);
  at.seed = s.o.seed >= 0 ? s.o.seed : s.p.train.seed;
  // The data's order is the run's seed's (a resumed run's: its checkpoint's).
  dataloader_set_shuffle_seed(t.data.data, static_cast<uint64_t>(at.seed));
  at.scaler = loss_scaler_start(s.p);
  at.weights_from = s.o.init_from.empty() ? init_describe(s.p) : s.o.init_from;
  if (s.o.resume) return resume(t);
  step_context& c = t.machine.c;
  t.machine.b->with_host_weights(c, true, [&] {
    if (s.o.init_from.empty())
      weights_init(c, static_cast<uint64_t>(at.seed));
    else
      weights_load(c, s.o.init_from);
  });
}

void training_print_banner(const training_run& t) {
  const run_shape& s = t.shape;
  const program& p = s.p;
  if (!s.lead) return;
  const int64_t start_step = t.progress.start_step;
  const dataloader& d = t.data.data;
  std::string data = dataloader_describe(d);
  if (const int64_t W = dataloader_sequences(d); W > 0) {
    const int64_t next = t.machine.c.sequence_base + start_step * program_global_batch(p);
    const double epochs = static_cast<double>(s.steps - start_step) *
                          static_cast<double>(program_global_batch(p)) / static_cast<double>(W);
    data += fmt::format("; epoch {} from sequence {} of it, {:.3g} epochs this run",
                        dataloader_epoch(d, next) + 1, with_commas(next % W), epochs);
    data += fmt::format(" (checked and mapped in {:.1f} ms)", t.data.open_ms);
  }
  std::string val;
  const training_validation& v = t.validation;
  if (v.every > 0)
    val = fmt::format("{}; its first {} sequences every {}, at checkpoints and at the end",
                      dataloader_describe(t.data.val), with_commas(v.sequences),
                      v.every == 1 ? "step" : fmt::format("{} steps", v.every));
  std::string written = "written before the next step";
  if (t.checkpoints.writer)
    written = fmt::format(
        "written behind the next steps from the plan's host staging buffer ({:.2f} MiB)",
        mib(p.buffers[p.plan.checkpoint_staging_buffer].bytes));
  else if (!s.o.checkpoint_sync)
    written += " (the spec plans no checkpoint, so the plan stages none)";
  run_log_banner(p, {s.li.launcher, t.machine.b->describe(), data, val, t.progress.weights_from,
                     s.steps, start_step, s.o.resume, s.tokens_per_step, t.checkpoints.config,
                     written, placement_banner(s.li.where, launch_plan(p))});
  if (const std::string note = optimizer_warmup_note(p, s.steps); !note.empty())
    std::printf("warning: %s\n", note.c_str());
  if (t.samples.sampler) std::printf("%s\n", t.samples.banner().c_str());
}

bool training_validation_due(const training_run& t, int64_t steps_done) {
  return t.validation.due(steps_done, t.shape.steps, t.progress.stop,
                          checkpoint_was_due(t, steps_done));
}

bool training_eval_due(const training_run& t, int64_t steps_done) {
  return t.eval.due(steps_done, t.shape.steps, t.progress.stop, checkpoint_was_due(t, steps_done));
}

bool training_samples_due(const training_run& t, int64_t steps_done) {
  return t.samples.due(steps_done);
}

val_record training_validate(training_run& t, int64_t steps_done) {
  const val_record v =
      t.validation.validate(t.shape.p, t.shape.li.rank, *t.machine.b, t.data.val, steps_done);
  run_totals& totals = t.outputs.totals;
  totals.validated = true;
  totals.last_val_loss = v.loss;
  totals.last_val_step = steps_done;
  return v;
}

eval_record training_evaluate(training_run& t, int64_t steps_done) {
  return t.eval.evaluate(t.shape, *t.machine.b, steps_done);
}

std::vector<std::string> training_sample(training_run& t, int64_t steps_done) {
  return t.samples.sample(t.shape, t.machine.c, *t.machine.b, t.progress.seed, steps_done);
}

void training_validate_untrained(training_run& t) {
  if (t.validation.every <= 0 || t.outputs.totals.steps_run > 0 || t.progress.stop) return;
  const val_record v = training_validate(t, t.progress.start_step);
  if (t.shape.lead) run_log_val(v, t.shape.steps);
}

void training_evaluate_untrained(training_run& t) {
  if (t.eval.every <= 0 || t.outputs.totals.steps_run > 0 || t.progress.stop) return;
  const eval_record e = training_evaluate(t, t.progress.start_step);
  if (t.shape.lead) run_log_eval(e, t.shape.steps);
}

void training_print_stopped(const training_run& t, int64_t step) {
  const run_shape& s = t.shape;
  if (!s.lead) return;
  const std::string& dir = t.checkpoints.config.dir;
  if (!t.progress.guard_stop.empty()) {
    std::printf(
        "stopped after step %lld of %lld: %s; the checkpoint written now holds the weights as "
        "they were before those steps and resumes after them (the spike lines above name their "
        "rows); continue with: %s\n",
        static_cast<long long>(step + 1), static_cast<long long>(s.steps),
        t.progress.guard_stop.c_str(),
        run_settings_resume_command(s.li.launcher, s.li.relaunched, s.p.parallel.world, s.o.binary,
                                    dir)
            .c_str());
    return;
  }
  const std::string signal = "asked to by " + t.progress.stop_signal;
  std::printf("stopped after step %lld of %lld: %s; continue with: %s\n",
              static_cast<long long>(step + 1), static_cast<long long>(s.steps), signal.c_str(),
              run_settings_resume_command(s.li.launcher, s.li.relaunched, s.p.parallel.world,
                                          s.o.binary, dir)
                  .c_str());
}

void training_finish(training_run& t) {
  t.machine.b->stop();
  comm_destroy(t.machine.c.comms);
}
