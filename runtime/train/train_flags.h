// train_flags: the generated binary's flags (`--help` lists them) and what
// they set, train_options; parsed once by train_main (runtime/train/train.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/program.h"
#include "runtime/train/run_settings.h"
#include "runtime/train/watchdog.h"

struct train_options {
  run_flags run;  // what shapes the run (runtime/train/run_settings.h)
  std::string init_from;
  // Multiple-choice evaluation (runtime/train/training_eval.cpp): "" or -1 where
  // not given (the spec's eval, eval_every, eval_examples).
  std::string eval;
  int64_t eval_every = -1;
  int64_t eval_examples = -1;
  std::string eval_scores;  // each evaluation's per-example scores, JSON lines (rank 0)
  // Samples (runtime/train/training_samples.cpp): -1 where not given (the spec's).
  int64_t sample_every = -1;
  int64_t sample_tokens = -1;
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
  std::string inject_stall;  // RANK:STEP:SECONDS (runtime/train/watchdog.h)
  watchdog_options watch;
  bool checkpoint_sync = false;  // write each checkpoint before the next step (no staging)
  bool no_watchdog = false;      // run without the watchdog (its cost measured against none)
  bool resume = false;
  std::string resume_from;  // empty: the newest checkpoint in the checkpoint directory
  // --resume-if-exists: resume from the checkpoint directory's newest, where
  // it holds one; else start afresh (a requeued batch job's one command).
  bool resume_if_exists = false;
  bool allow_batch_change = false;
  bool allow_placement = false;  // run ranks placed on hosts otherwise than the plan's nodes
  bool allow_bytes = false;      // --data/--val: a text file into a vocabulary larger than 256
  std::string binary;            // argv[0], for the commands the run prints
  backend_options backend;
  watch_injected_stall stall;  // --inject-stall, parsed
};

// Parses argv into `o`. The exit status when the binary ends here (`--help`:
// 0, `--print-schedule` prints the schedule: 0, a bad flag: 2 with the
// message in `error`, for the ranks to say once); nullopt when the run goes on.
std::optional<int> train_flags_parse(const program& p, int argc, char** argv,
                                     const backend_kind& kind, train_options& o,
                                     std::string& error);

// The Hugging Face model type whose tensor names --save writes ("gpt2",
// "llama", or a llama option's: "qwen3", "gemma", ...).
const char* hf_family_name(const program& p);
