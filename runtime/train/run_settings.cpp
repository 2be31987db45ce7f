// run_settings: a run's flags over the spec, recorded, and taken back on resume.
#include "runtime/train/run_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace {

std::string sources(const std::vector<std::string>& flag, const char* spec_default) {
  return flag.empty() ? std::string(spec_default) : fmt::format("{}", fmt::join(flag, " "));
}

std::string sequences(int64_t n) {
  return fmt::format("{} sequence{}", n, n == 1 ? "" : "s");
}

std::string batch_shape(int64_t world, const checkpoint_run& r) {
  return fmt::format("world {} x micro-batch {} x {} micro-batch{}", world, r.micro_batch,
                     r.micro_batches, r.micro_batches == 1 ? "" : "es");
}

// The fsdpgen command that builds this program's model for `world` ranks with
// a global batch of `global` sequences, or why none does.
std::string batch_keeping_build(const program& p, int64_t world, int64_t global,
                                const std::string& binary) {
  const int64_t per_rank_step = world * p.parallel.micro_batches;
  if (global % per_rank_step == 0)
    return fmt::format(
        "build one that keeps it with `fsdpgen {} --world {} --micro-batch {} -o {}`", p.spec_path,
        world, global / per_rank_step, binary);
  if (global % world == 0)
    return fmt::format(
        "build one that keeps it with `fsdpgen {} --world {} -o {}` from a spec whose micro_batch "
        "x accumulate's micro_batches is {}",
        p.spec_path, world, binary, global / world);
  return fmt::format("no binary for {} ranks keeps it ({} is not a multiple of {})", world, global,
                     world);
}

}  // namespace

checkpoint_run run_settings_of(const program& p, const run_flags& f) {
  checkpoint_run r;
  r.steps = f.steps >= 0 ? f.steps : p.train.steps;
  r.data = f.data;
  r.shuffle = f.shuffle.empty() ? p.train.shuffle : f.shuffle == "true";
  r.val = f.val;
  // --val without the spec's val: every 250 steps over 256 sequences.
  r.val_every = f.val_every >= 0                      ? f.val_every
                : program_has_val(p) || f.val.empty() ? p.train.val_every
                                                      : 250;
  r.val_sequences = f.val_sequences > 0         ? f.val_sequences
                    : p.train.val_sequences > 0 ? p.train.val_sequences
                                                : 256;
  r.checkpoint_every = f.checkpoint_every >= 0 ? f.checkpoint_every : p.train.checkpoint.every;
  r.checkpoint_dir = f.checkpoint_dir.empty() ? p.train.checkpoint.dir : f.checkpoint_dir;
  r.checkpoint_keep = f.checkpoint_keep > 0 ? f.checkpoint_keep : p.train.checkpoint.keep;
  r.log_every = f.log_every > 0 ? f.log_every : std::max<int64_t>(1, p.train.log_every);
  r.save = f.save;
  r.metrics = f.metrics;
  r.micro_batch = p.parallel.micro_batch;
  r.micro_batches = p.parallel.micro_batches;
  return r;
}

int64_t run_settings_global_batch(int64_t world, const checkpoint_run& r) {
  return world * r.micro_batch * r.micro_batches;
}

run_resumed run_settings_resume(const program& p, const run_flags& f,
                                const checkpoint_run& recorded, int64_t recorded_world,
                                int64_t step, bool allow_batch_change, const std::string& binary) {
  const checkpoint_run fresh = run_settings_of(p, run_flags{});
  const checkpoint_run given = run_settings_of(p, f);
  run_resumed out;
  checkpoint_run& r = out.run;
  r = recorded;
  r.micro_batch = given.micro_batch;
  r.micro_batches = given.micro_batches;

  // Each setting: the flag's value when given, else the recorded one, noted
  // when a fresh launch would not have it. `changed` words a given value's
  // effect on the run, or "" where it changes nothing that was measured.
  auto take = [&](auto member, bool flag_given, const std::string& recorded_text,
                  const std::string& changed) {
    if (flag_given) {
      r.*member = given.*member;
      if (!(given.*member == recorded.*member) && !changed.empty()) out.warnings.push_back(changed);
    } else if (!(recorded.*member == fresh.*member)) {
      out.taken.push_back(recorded_text);
    }
  };
  take(&checkpoint_run::steps, f.steps >= 0, fmt::format("--steps {}", recorded.steps),
       fmt::format("--steps {}: the run was launched for {} steps; the lr schedule now ends at "
                   "step {}, not {}",
                   given.steps, recorded.steps, given.steps, recorded.steps));
  take(&checkpoint_run::data, !f.data.empty(), fmt::format("--data {}", sources(recorded.data, "")),
       fmt::format("--data {}: the run was launched reading {}; from step {} it trains on {} "
                   "from the sequence the run reached",
                   sources(given.data, ""), sources(recorded.data, "the spec's data"), step + 1,
                   sources(given.data, "")));
  take(&checkpoint_run::shuffle, !f.shuffle.empty(), fmt::format("--shuffle {}", recorded.shuffle),
       fmt::format("--shuffle {}: the run was launched with shuffle {}; the sequences after step "
                   "{} come in another order",
                   given.shuffle, recorded.shuffle, step));
  const std::string val_changes =
      "validation losses from here on are not comparable with "
      "earlier ones";
  take(&checkpoint_run::val, !f.val.empty(), fmt::format("--val {}", sources(recorded.val, "")),
       fmt::format("--val {}: the run was launched validating on {}; {}", sources(given.val, ""),
                   sources(recorded.val, "the spec's validation data"), val_changes));
  take(&checkpoint_run::val_every, f.val_every >= 0,
       fmt::format("--val-every {}", recorded.val_every), "");
  take(&checkpoint_run::val_sequences, f.val_sequences > 0,
       fmt::format("--val-sequences {}", recorded.val_sequences),
       fmt::format("--val-sequences {}: the run was launched validating on {}; {}",
                   given.val_sequences, sequences(recorded.val_sequences), val_changes));
  take(&checkpoint_run::checkpoint_every, f.checkpoint_every >= 0,
       fmt::format("--checkpoint-every {}", recorded.checkpoint_every), "");
  take(&checkpoint_run::checkpoint_dir, !f.checkpoint_dir.empty(),
       fmt::format("--checkpoint-dir {}", recorded.checkpoint_dir), "");
  take(&checkpoint_run::checkpoint_keep, f.checkpoint_keep > 0,
       fmt::format("--checkpoint-keep {}", recorded.checkpoint_keep), "");
  take(&checkpoint_run::log_every, f.log_every > 0,
       fmt::format("--log-every {}", recorded.log_every), "");
  take(&checkpoint_run::save, !f.save.empty(), fmt::format("--save {}", recorded.save), "");
  take(&checkpoint_run::metrics, !f.metrics.empty(), fmt::format("--metrics {}", recorded.metrics),
       "");

  const int64_t was = run_settings_global_batch(recorded_world, recorded);
  const int64_t now = run_settings_global_batch(p.parallel.world, r);
  if (was != now) {
    const std::string change = fmt::format("the global batch changes from {} ({}) to {} ({})",
                                           sequences(was), batch_shape(recorded_world, recorded),
                                           sequences(now), batch_shape(p.parallel.world, r));
    if (allow_batch_change)
      out.warnings.push_back(fmt::format(
          "--allow-batch-change: {}; the run continues from the sequence it reached, {} a step, "
          "and its loss curve and lr no longer match the launched run's",
          change, sequences(now)));
    else
      out.batch_problem =
          fmt::format("{}: {}; pass --allow-batch-change to continue with {} a step", change,
                      batch_keeping_build(p, p.parallel.world, was, binary), sequences(now));
  }
  return out;
}

std::string run_settings_resume_command(const std::string& launcher, bool relaunched, int64_t world,
                                        const std::string& binary,
                                        const std::string& checkpoint_dir) {
  std::string start = binary;
  if (launcher == "srun" && !relaunched)
    start = fmt::format("srun -n {} --mpi=pmix {}", world, binary);
  else if (launcher == "mpirun" && !relaunched)
    start = fmt::format("mpirun -n {} {}", world, binary);
  return fmt::format("{} --resume {}", start, checkpoint_dir);
}
