// train: the generated binary's main loop, the same for every target. Parses
// the binary's flags, launches, sets up communicators, data, the backend
// (runtime/backend.h: arena and executor) and weights, runs the planned step
// `steps` times, logs one line per logged step and a summary, and writes
// weights, metrics and the trace.
#include <mpi.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <signal.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
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
#include "runtime/human.h"
#include "runtime/init.h"
#include "runtime/launch.h"
#include "runtime/loss_scale.h"
#include "runtime/memory_report.h"
#include "runtime/optimizer.h"
#include "runtime/step.h"
#include "runtime/trace.h"
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
  int64_t steps = -1;
  std::string data;
  std::string init_from;
  std::string save;
  std::string trace;
  int64_t trace_step = -1;
  bool print_schedule = false;
  int64_t seed = -1;
  int64_t log_every = -1;
  std::string metrics;
  int64_t inject_overflow = -1;
  int64_t inject_leak_bytes = 0;
  double inject_grad_scale = 1;
  bool resume = false;
  std::string resume_from;  // empty: the newest checkpoint in the checkpoint directory
  int64_t checkpoint_every = -1;
  std::string checkpoint_dir;
  int64_t checkpoint_keep = -1;
  backend_options backend;
};

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02.0f}s", static_cast<int>(s / 60), std::fmod(s, 60));
  return fmt::format("{}h{:02}m", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
}

data_config data_config_of(const program& p, const std::string& flag) {
  data_config d;
  d.vocab = p.vocab;
  d.context = p.context;
  d.seed = static_cast<uint64_t>(p.data_seed);
  d.kind = p.data == data_source::synthetic ? data_kind::synthetic
           : p.data == data_source::text    ? data_kind::text
                                            : data_kind::tokens;
  d.path = p.data_path;
  if (!flag.empty()) {
    if (flag == "synthetic") {
      d.kind = data_kind::synthetic;
    } else {
      d.path = flag;
      d.kind = flag.size() > 4 && flag.substr(flag.size() - 4) == ".bin" ? data_kind::tokens
                                                                         : data_kind::text;
    }
  }
  return d;
}

// How the embedding is stored, when its vocabulary is padded ("" when not).
std::string vocab_padding_note(const program& p) {
  if (p.padded_vocab <= p.vocab) return "";
  return fmt::format("; vocab {} stored padded to {} rows: {} zero elements, not parameters",
                     p.vocab, p.padded_vocab,
                     with_commas((p.padded_vocab - p.vocab) * p.width * (p.tied ? 1 : 2)));
}

const char* sharding_of(const program& p) {
  if (p.shard_group == 1) return p.world == 1 ? "single rank" : "no_shard (replicated)";
  return p.shard_group == p.world ? "sharded over the world" : "hybrid";
}

// What --resume names, as rank 0 sees it (collective: every rank loads the same one).
std::string resume_path(const options& o, const checkpoint_config& cfg, bool lead) {
  std::string path, error;
  if (lead) {
    try {
      path = checkpoint_resolve(o.resume_from.empty() ? cfg.dir : o.resume_from);
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
// Creates nothing that stays.
std::string output_file_problem(const char* flag, const std::string& path) {
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

// Collective, before any work: every output this rank will write can be
// written (checkpoints' directory created when checkpoints are planned; a
// stop signal's checkpoint needs it too). Throws agreed_error on every rank
// otherwise. --metrics and --trace are written by rank 0 alone.
void check_outputs(const options& o, const checkpoint_config& ckpt, int64_t steps, bool lead) {
  std::string error;
  if (!o.save.empty()) error = output_file_problem("--save", o.save);
  if (lead && error.empty() && !o.metrics.empty())
    error = output_file_problem("--metrics", o.metrics);
  if (lead && error.empty() && !o.trace.empty()) error = output_file_problem("--trace", o.trace);
  if (error.empty() && steps > 0) {
    const std::string why = checkpoint_dir_problem(ckpt.dir, ckpt.every > 0);
    if (!why.empty())
      error = o.checkpoint_dir.empty()
                  ? fmt::format("the spec's checkpoint directory {}: {}", ckpt.dir, why)
                  : fmt::format("--checkpoint-dir {}: {}", ckpt.dir, why);
  }
  agree_on_error(error, "checking the outputs");
}

// --inject-leak: heap bytes allocated, touched and never freed, as a step
// that leaked would.
void leak(int64_t bytes) {
  static std::vector<std::unique_ptr<char[]>> kept;
  kept.emplace_back(new char[static_cast<size_t>(bytes)]);
  std::memset(kept.back().get(), 1, static_cast<size_t>(bytes));
}

int run(const program& p, const options& o, const launch_info& li, const backend_kind& kind) {
  const bool lead = li.rank == 0;
  const int64_t steps = o.steps >= 0 ? o.steps : p.steps;
  const checkpoint_config ckpt{o.checkpoint_every >= 0 ? o.checkpoint_every : p.checkpoint_every,
                               o.checkpoint_dir.empty() ? p.checkpoint_dir : o.checkpoint_dir,
                               o.checkpoint_keep > 0 ? o.checkpoint_keep : p.checkpoint_keep};
  const int64_t log_every = o.log_every > 0 ? o.log_every : std::max<int64_t>(1, p.log_every);
  const int64_t tokens_per_step = p.world * p.micro_batches * p.micro_batch * p.context;

  check_outputs(o, ckpt, steps, lead);

  arena mem;
  step_context c;
  c.p = &p;
  dataloader data;
  // Declared after what it points into, so that it is destroyed (stopping
  // its threads or freeing the device after a failure) before them.
  std::unique_ptr<backend> b = kind.make(p);
  std::string error;
  try {
    data = dataloader_open(data_config_of(p, o.data));
  } catch (const std::exception& e) {
    error = e.what();
    if (o.data.empty())
      error += fmt::format(
          " (the data file of {}, found from that spec's directory as fsdpgen was given it: run "
          "where fsdpgen ran, or pass --data FILE)",
          p.spec_path);
  }
  agree_on_error(error, "set-up");
  c.comms = comm_create(p.shard_group);
  c.data = &data;
  const optimizer_decay_table decay = optimizer_decay_ranges(p, c.comms.shard_rank);
  c.decay_ranges = decay.pointers.data();
  c.decay_range_counts = decay.counts.data();
  error.clear();
  try {
    b->start(c, mem, o.backend);
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_on_error(error, "set-up");

  int64_t seed = o.seed >= 0 ? o.seed : p.seed, start_step = 0;
  loss_scaler scaler = loss_scaler_start(p);
  std::string weights_from = o.init_from.empty() ? "GPT-2 init" : o.init_from;
  if (o.resume) {
    const std::string path = resume_path(o, ckpt, lead);
    checkpoint_state resumed;
    b->with_host_weights(c, true, [&] { resumed = checkpoint_load(c, path); });
    start_step = resumed.step;
    scaler = resumed.scaler;
    seed = resumed.seed;
    c.sequence_base = resumed.sequences - start_step * checkpoint_sequences_per_step(p);
    weights_from = fmt::format("resumed from {} (step {}, {} sequences read)", path, start_step,
                               with_commas(resumed.sequences));
    if (lead && resumed.data != dataloader_describe(data))
      std::printf("note: the checkpoint was written reading %s; this run reads %s\n",
                  resumed.data.c_str(), dataloader_describe(data).c_str());
  } else {
    b->with_host_weights(c, true, [&] {
      if (o.init_from.empty())
        weights_init(c, static_cast<uint64_t>(seed));
      else
        weights_load(c, o.init_from);
    });
  }

  if (lead) {
    std::printf("fsdpgen train: %s (%s params%s) from %s\n", p.model_name,
                with_commas(p.params).c_str(), vocab_padding_note(p).c_str(), p.spec_path);
    std::printf("  %lld rank%s (%s, shard group %lld), launched by %s, %s\n",
                static_cast<long long>(p.world), p.world == 1 ? "" : "s", sharding_of(p),
                static_cast<long long>(p.shard_group), li.launcher.c_str(), b->describe().c_str());
    std::printf(
        "  params %s, reduce %s, master %s | %lld micro-batch%s of %lld x %lld tokens | "
        "%s tokens per step\n",
        dtype_name(p.param_dtype), dtype_name(p.reduce_dtype), dtype_name(p.master_dtype),
        static_cast<long long>(p.micro_batches), p.micro_batches == 1 ? "" : "es",
        static_cast<long long>(p.micro_batch), static_cast<long long>(p.context),
        with_commas(tokens_per_step).c_str());
    std::printf("  data: %s | weights: %s\n", dataloader_describe(data).c_str(),
                weights_from.c_str());
    std::printf("  lr: %s\n", optimizer_lr_describe(p, steps).c_str());
    if (ckpt.every > 0)
      std::printf("  checkpoints: every %lld steps and at the end, in %s (newest %lld kept)\n",
                  static_cast<long long>(ckpt.every), ckpt.dir.c_str(),
                  static_cast<long long>(ckpt.keep));
    if (start_step >= steps)
      std::printf(
          "  the checkpoint is at step %lld and the run has %lld steps: nothing to train "
          "(--steps N trains further)\n",
          static_cast<long long>(start_step), static_cast<long long>(steps));
    std::printf("  arena %.2f MiB per rank (planned peak %.2f MiB)%s\n", mib(p.device_arena_bytes),
                mib(p.planned_live_peak_bytes),
                p.host_arena_bytes
                    ? fmt::format(", host {:.2f} MiB", mib(p.host_arena_bytes)).c_str()
                    : "");
    std::fflush(stdout);
  }

  std::FILE* metrics = nullptr;
  error.clear();
  if (lead && !o.metrics.empty()) {
    metrics = std::fopen(o.metrics.c_str(), "w");
    if (!metrics) error = fmt::format("cannot write {}: {}", o.metrics, std::strerror(errno));
  }
  agree_on_error(error, "opening --metrics");

  const int64_t trace_step =
      o.trace_step >= 0 ? o.trace_step : start_step + std::min<int64_t>(2, steps - start_step - 1);
  std::vector<int64_t> trace_start, trace_end;
  double first_loss = 0, last_loss = 0, total_s = 0, timed_s = 0;
  int64_t timed_steps = 0, skipped = 0, steps_run = 0;
  memory_watch memory;
  memory.settle_steps = std::max<int64_t>(1, b->warmup_steps());
  bool stop = false;
  const auto run_start = std::chrono::steady_clock::now();
  for (int64_t step = start_step; step < steps; ++step) {
    const double lr = optimizer_lr(p, step, steps);
    const double loss_scale = scaler.scale;
    const double grad_scale = loss_scaler_grad_scale(scaler);
    c.grad_scale = static_cast<float>(grad_scale);
    c.dloss_scale = static_cast<float>(grad_scale / tokens_per_step);
    // As a wrong average across ranks would: every gradient scaled, unknown to the optimizer.
    if (p.world > 1) c.dloss_scale *= static_cast<float>(o.inject_grad_scale);
    // As an fp16 overflow would: every gradient of this step becomes non-finite.
    if (step == o.inject_overflow) c.dloss_scale = std::numeric_limits<float>::infinity();
    c.optimizer_step = scaler.applied_steps + 1;
    const bool traced = !o.trace.empty() && step == trace_step;
    const auto t0 = std::chrono::steady_clock::now();
    allocations_count(step - start_step >= b->warmup_steps());
    const step_result r = b->run_step(step, lr, traced);
    if (o.inject_leak_bytes > 0) leak(o.inject_leak_bytes);
    allocations_count(false);
    // With the loss: how many ranks were asked to stop.
    const double mine[2] = {r.loss_sum, g_stop_signal.load() ? 1.0 : 0.0};
    double all[2] = {0, 0};
    MPI_CHECK(MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    const double loss_sum = all[0];
    stop = all[1] > 0;
    steps_run = step + 1 - start_step;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double loss = loss_sum / static_cast<double>(tokens_per_step);
    const double norm = r.grad_norm;
    skipped += r.skipped;
    loss_scaler_update(scaler, r.skipped);
    const memory_reading machine = b->read_memory();
    memory_watch_step(memory, machine);
    if (step == start_step) first_loss = loss;
    last_loss = loss;
    total_s += s;
    if (step > start_step) timed_s += s, ++timed_steps;
    if (traced) trace_start = b->op_start_ns(), trace_end = b->op_end_ns();
    if (metrics)
      std::fprintf(metrics,
                   "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %s, \"ms\": "
                   "%.3f, \"host_resident_bytes\": %lld, \"arena_resident_bytes\": %lld, "
                   "\"arena_growth_bytes\": %lld%s, "
                   "\"skipped\": %s, \"loss_scale\": %.9g}\n",
                   static_cast<long long>(step + 1), loss, lr,
                   // JSON has no inf or NaN: a non-finite norm is null.
                   std::isfinite(norm) ? fmt::format("{:.9g}", norm).c_str() : "null", s * 1e3,
                   static_cast<long long>(machine.host_resident_bytes),
                   static_cast<long long>(machine.arena_resident_bytes),
                   static_cast<long long>(machine.arena_growth_bytes),
                   machine.device_used_bytes < 0
                       ? ""
                       : fmt::format(", \"device_used_bytes\": {}, \"device_arena_bytes\": {}",
                                     machine.device_used_bytes, machine.device_arena_bytes)
                             .c_str(),
                   r.skipped ? "true" : "false", loss_scale);
    if (metrics) std::fflush(metrics);  // whole lines, for whoever follows the file
    if (lead && ((step + 1) % log_every == 0 || step == start_step || step + 1 == steps)) {
      double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      double eta = elapsed / static_cast<double>(step + 1 - start_step) *
                   static_cast<double>(steps - step - 1);
      std::printf(
          "step %*lld/%lld | loss %.6f | lr %.3e | norm %.4f | %.1f ms | %s tok/s | %s %.2f "
          "MiB | eta %s%s%s\n",
          static_cast<int>(std::to_string(steps).size()), static_cast<long long>(step + 1),
          static_cast<long long>(steps), loss, lr, norm, s * 1e3,
          with_commas(static_cast<int64_t>(static_cast<double>(tokens_per_step) / s)).c_str(),
          machine.device_used_bytes < 0 ? "rss" : "gpu",
          mib(machine.device_used_bytes < 0 ? machine.host_resident_bytes
                                            : machine.device_used_bytes),
          duration(eta).c_str(),
          scaler.enabled ? fmt::format(" | scale {:g}", loss_scale).c_str() : "",
          r.skipped ? " | skipped (non-finite gradients)" : "");
      std::fflush(stdout);
    }
    if ((ckpt.every > 0 && ((step + 1) % ckpt.every == 0 || step + 1 == steps)) || stop) {
      const checkpoint_state state{step + 1,
                                   c.sequence_base + (step + 1) * checkpoint_sequences_per_step(p),
                                   scaler, seed, dataloader_describe(data)};
      const auto t = std::chrono::steady_clock::now();
      checkpoint_saved saved;
      b->with_host_weights(c, false, [&] { saved = checkpoint_save(c, ckpt, state); });
      if (lead) {
        std::printf("checkpoint: step %lld written to %s (%.2f MiB in %.2f s%s)\n",
                    static_cast<long long>(step + 1), saved.path.c_str(), mib(saved.bytes),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(),
                    saved.removed ? fmt::format(", {} older removed", saved.removed).c_str() : "");
        std::fflush(stdout);
      }
    }
    if (stop) {
      if (lead)
        std::printf(
            "stopped after step %lld of %lld: asked to by a signal (SIGUSR1 or SIGTERM); "
            "continue with --resume%s\n",
            static_cast<long long>(step + 1), static_cast<long long>(steps),
            // A plain --resume looks in the spec's directory.
            ckpt.dir == p.checkpoint_dir ? "" : (" " + ckpt.dir).c_str());
      break;
    }
  }
  if (metrics) std::fclose(metrics);

  const int64_t warmup = b->warmup_steps();
  const std::string memory_lines = memory_report(memory, p, warmup, lead);
  if (lead && steps_run > 0) {
    double per_step = timed_steps ? timed_s / static_cast<double>(timed_steps) : total_s;
    std::printf(
        "done: %lld step%s in %.1f s | loss %.4f -> %.4f | %.1f ms/step | %s tok/s\n%s",
        static_cast<long long>(steps_run), steps_run == 1 ? "" : "s", total_s, first_loss,
        last_loss, per_step * 1e3,
        with_commas(static_cast<int64_t>(static_cast<double>(tokens_per_step) / per_step)).c_str(),
        memory_lines.c_str());
    if (skipped)
      std::printf(
          "%lld step%s skipped for non-finite gradients%s\n", static_cast<long long>(skipped),
          skipped == 1 ? "" : "s",
          scaler.enabled ? fmt::format(" (loss scale now {:g})", scaler.scale).c_str() : "");
  }

  std::string trace_error;  // agreed after the weights are saved, which it must not prevent
  if (!o.trace.empty() && trace_step >= start_step && trace_step < start_step + steps_run) {
    std::vector<int64_t> mine = trace_start;
    mine.insert(mine.end(), trace_end.begin(), trace_end.end());
    std::vector<int64_t> all(lead ? mine.size() * static_cast<size_t>(p.world) : 0);
    MPI_CHECK(MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                         static_cast<int>(mine.size()), MPI_INT64_T, 0, MPI_COMM_WORLD));
    if (lead) {
      std::vector<std::vector<int64_t>> starts, ends;
      const size_t n = static_cast<size_t>(p.op_count);
      for (int64_t r = 0; r < p.world; ++r) {
        auto base = all.begin() + static_cast<ptrdiff_t>(r * 2 * n);
        starts.emplace_back(base, base + static_cast<ptrdiff_t>(n));
        ends.emplace_back(base + static_cast<ptrdiff_t>(n), base + static_cast<ptrdiff_t>(2 * n));
      }
      std::ofstream f(o.trace);
      f << trace_json(p, trace_step, starts, ends);
      f.close();
      const double hidden = trace_hidden_comm_fraction(p, starts, ends);
      if (!f)
        trace_error = fmt::format("cannot write {}: {}", o.trace, std::strerror(errno));
      else
        std::printf("trace: step %lld of %lld ranks written to %s (%s)\n",
                    static_cast<long long>(trace_step + 1), static_cast<long long>(p.world),
                    o.trace.c_str(),
                    hidden < 0
                        ? "no communication"
                        : fmt::format("communication hidden behind compute: {:.0f}%", 100 * hidden)
                              .c_str());
    }
  }
  if (!o.save.empty() && stop) {
    if (lead)
      std::printf(
          "not writing %s: the run stopped before its last step (the checkpoint has "
          "the weights: fsdpgen merge)\n",
          o.save.c_str());
  } else if (!o.save.empty()) {
    b->with_host_weights(c, false, [&] { weights_save(c, o.save, start_step + steps_run); });
    if (lead)
      std::printf("saved %s (%s params, F32, Hugging Face GPT-2 names)\n", o.save.c_str(),
                  with_commas(p.params).c_str());
  }
  std::fflush(stdout);
  agree_on_error(trace_error, "writing the trace");
  b->stop();
  comm_destroy(c.comms);
  return 0;
}

// OpenMP threads spinning beside OpenBLAS's slow GEMMs down several times;
// libgomp reads its wait policy when it loads, so set it and start again.
void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv);  // on failure, go on with the default policy
}

}  // namespace

int train_main(const program& p, int argc, char** argv, const backend_kind& kind) {
  prefer_passive_openmp(argv);
  CLI::App app{fmt::format("Trains {} as planned by fsdpgen from {}.", p.model_name, p.spec_path)};
  options o;
  app.add_option("--steps", o.steps, "training steps (default: the spec's)")
      ->check(whole_number(0));
  app.add_option("--data", o.data, "synthetic, a text file, or an llm.c .bin token file");
  app.add_option("--init-from", o.init_from, "load weights from a safetensors file (GPT-2 names)");
  app.add_option("--save", o.save, "write the final weights as safetensors (GPT-2 names)");
  CLI::Option* resume =
      app.add_option("--resume", o.resume_from,
                     "continue from a checkpoint: a step_N directory, a directory of them (its "
                     "newest), or without a value the newest in the checkpoint directory")
          ->expected(0, 1);
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "steps between checkpoints, also written at the end (0: none; default: the "
                 "spec's checkpoint(every))")
      ->check(whole_number(0));
  app.add_option("--checkpoint-dir", o.checkpoint_dir,
                 "where checkpoints go (default: the spec's)");
  app.add_option("--checkpoint-keep", o.checkpoint_keep,
                 "newest checkpoints kept (default: the spec's keep)")
      ->check(whole_number(1));
  app.add_option("--trace", o.trace, "write the measured timeline of one step (Chrome trace)");
  app.add_option("--trace-step", o.trace_step, "the 0-based step to trace (default 2)")
      ->check(whole_number(0));
  app.add_flag("--print-schedule", o.print_schedule, "print the static schedule and exit");
  app.add_option("--seed", o.seed, "initialization seed (default: the spec's)")
      ->check(whole_number(0));
  app.add_option("--log-every", o.log_every, "log every N steps (default: the spec's)")
      ->check(whole_number(1));
  app.add_option("--metrics", o.metrics, "write one JSON line per step (rank 0)");
  app.add_option("--inject-overflow", o.inject_overflow,
                 "testing aid: make every gradient of this 0-based step non-finite, as an fp16 "
                 "overflow would (the step is skipped and an fp16 loss scale backs off)")
      ->check(whole_number(0));
  app.add_option("--inject-leak", o.inject_leak_bytes,
                 "testing aid: every step allocates this many bytes on the heap and keeps them, "
                 "which the memory report must show")
      ->check(whole_number(0));
  app.add_option("--inject-grad-scale", o.inject_grad_scale,
                 "testing aid: at world > 1, multiply every gradient by this factor unknown to "
                 "the optimizer, as a wrong average across ranks would")
      ->check(positive_number());
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
  o.resume = resume->count() > 0;
  if (o.print_schedule) {
    std::fputs(p.schedule_text, stdout);
    return 0;
  }
  const int64_t run_steps = o.steps >= 0 ? o.steps : p.steps;
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
  if (const std::string why = optimizer_steps_problem(p, o.steps); !why.empty()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    return 2;
  }
  launch_info li = launch_init(p, argc, argv);
  install_stop_handlers();
  try {
    run(p, o, li, kind);
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
  return 0;
}
