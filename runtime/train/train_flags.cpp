// train_flags: the generated binary's flags, read into train_options
// (runtime/train/train_flags.h).
#include "runtime/train/train_flags.h"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <utility>

#include "runtime/files/hf_model_of.h"
#include "runtime/flags.h"
#include "runtime/train/guard.h"

const char* hf_family_name(const program& p) {
  return hf_model_type(hf_model_of(p.model));
}

std::optional<int> train_flags_parse(const program& p, int argc, char** argv,
                                     const backend_kind& kind, train_options& o,
                                     std::string& error) {
  CLI::App app{fmt::format("Trains {} as planned by fsdpgen from {}.", p.model_name, p.spec_path)};
  app.add_option("--steps", o.run.steps, "training steps (default: the spec's)")
      ->check(whole_number(0));
  app.add_option("--data", o.run.data,
                 "synthetic, a text file, or llm.c .bin token files and quoted glob patterns "
                 "(uint16 GPT-2 or uint32 Llama 3 tokens), read as one stream in the order given");
  app.add_option("--val", o.run.val, "validation data, as --data (default: the spec's val)");
  app.add_flag("--allow-bytes", o.allow_bytes,
               "train on a text file's bytes (--data, --val) although the model's vocabulary is "
               "larger than 256 (a tokenizer's; refused without it)");
  app.add_option("--val-every", o.run.val_every,
                 "steps between validations, also run at checkpoints and at the end (0: none; "
                 "default: the spec's val_every)")
      ->check(whole_number(0));
  app.add_option("--val-sequences", o.run.val_sequences,
                 "sequences each validation reads from the start of the validation data "
                 "(default: the spec's val_sequences)")
      ->check(whole_number(1));
  app.add_option("--eval", o.eval,
                 "llm.c's HellaSwag-format multiple-choice file to score (docs/eval.md; default: "
                 "the spec's eval)");
  app.add_option("--eval-every", o.eval_every,
                 "steps between evaluations, also run at checkpoints and at the end (0: none; "
                 "default: the spec's eval_every)")
      ->check(whole_number(0));
  app.add_option("--eval-examples", o.eval_examples,
                 "examples each evaluation scores from the start of the file (0: all; default: "
                 "the spec's eval_examples)")
      ->check(whole_number(0));
  app.add_option("--eval-scores", o.eval_scores,
                 "write each evaluation's per-example scores (each candidate's loss sum and "
                 "tokens, both predictions) as JSON lines, replaced by the next evaluation");
  app.add_option("--sample-every", o.sample_every,
                 "steps between samples: rank 0 prints a few generations from the document "
                 "start (docs/sample.md; 0: none; default: the spec's sample_every)")
      ->check(whole_number(0));
  app.add_option("--sample-tokens", o.sample_tokens,
                 "tokens each sample generates (default: the spec's sample_tokens)")
      ->check(whole_number(1));
  app.add_option("--shuffle", o.run.shuffle,
                 "true: each epoch reads the training sequences in a seeded order; false: in "
                 "file order (default: the spec's shuffle)")
      ->check(CLI::IsMember({"true", "false"}));
  app.add_option("--init-from", o.init_from,
                 "load weights (Hugging Face names) from a .safetensors file, a model directory "
                 "(sharded or not; its config.json is checked) or its index file");
  app.add_option("--save", o.run.save,
                 fmt::format("write the final weights with Hugging Face {} names: one "
                             "safetensors file (x.safetensors), or else a model directory "
                             "transformers loads (config, tokenizer of the token set)",
                             hf_family_name(p)));
  CLI::Option* resume =
      app.add_option("--resume", o.resume_from,
                     "continue the run a checkpoint holds (its steps, data, validation, "
                     "checkpoints and outputs as launched; a flag given overrides one, with a "
                     "warning where that changes the run): a step_N directory, a directory of "
                     "them (its newest), or without a value the newest in the checkpoint "
                     "directory")
          ->expected(0, 1);
  app.add_flag("--resume-if-exists", o.resume_if_exists,
               "resume as --resume does from the newest complete checkpoint in the checkpoint "
               "directory where it holds one, else start the run afresh (--init-from and "
               "--seed then apply): the one command of a job that a scheduler may requeue")
      ->excludes(resume);
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
  app.add_flag("--allow-placement", o.allow_placement,
               "run although the ranks span hosts otherwise than the plan's nodes (another "
               "number of ranks per host, or a shard group across hosts), with a warning");
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
                 "(runtime/train/data.h data_trace)");
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
    error = fmt::format("{} (--help lists the flags)", flag_error_message(app, e));
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
      error = fmt::format(
          "{} {} is not below the number of steps: the run has {} step{}, numbered from 0", flag,
          step, run_steps, run_steps == 1 ? "" : "s");
      return 2;
    }
  if (!o.inject_stall.empty()) {
    const std::string why = watch_parse_injected_stall(o.inject_stall, p.parallel.world, o.stall);
    if (!why.empty()) {
      error = fmt::format("--inject-stall: {} (--help lists the flags)", why);
      return 2;
    }
  }
  return std::nullopt;
}
