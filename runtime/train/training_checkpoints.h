// training_checkpoints: a run's checkpoints: when they are due, writing one
// at once or behind the next steps, and, before the run is made, resuming
// from one: which checkpoint, its manifest and its record of the run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/files/checkpoint_files.h"
#include "runtime/program.h"
#include "runtime/step_context.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/train_flags.h"

struct training_checkpoints {
  explicit training_checkpoints(const checkpoint_run& run)
      : config{run.checkpoint_every, run.checkpoint_dir, run.checkpoint_keep} {}

  // After 0-based step `step` of `steps`: every config.every steps, at the
  // end, and when the run stops (`stop`).
  bool due(int64_t step, int64_t steps, bool stop) const;
  // At set-up: the writer, where checkpoints are due, the plan stages them
  // and `sync` (--checkpoint-sync) is not given; throws on every rank if the
  // plan's staging is not this rank's parts.
  void start_writer(const program& p, bool sync);
  // Collective: completes the checkpoint still being written, then writes
  // `state` behind the next steps, or at once when it is the run's `last`
  // (nothing follows it to hide the write behind) or without a writer.
  // Returns the step's stall: all the time spent here. Rank 0 (`lead`) adds
  // each checkpoint's line to `lines`.
  double save(step_context& c, backend& b, const checkpoint_state& state, bool last, bool lead,
              std::string& lines);
  // Collective: completes a checkpoint still being written, if any.
  void finish_pending(step_context& c, bool lead, std::string& lines);

  const checkpoint_config config;
  // Writes checkpoints behind the steps (null: synchronously).
  std::unique_ptr<checkpoint_writer> writer;
  double staged_s = 0;        // the pending checkpoint's staging (checkpoint_writer::start)
  double staged_stall_s = 0;  // its step's stall: that and completing the one before
};

// What --resume names, as rank 0 sees it (collective: every rank loads the
// same one); without a value, the newest checkpoint in `checkpoint_dir`. With
// --resume-if-exists that newest one, or "" where there is none (a fresh run).
std::string resume_path(const train_options& o, const std::string& checkpoint_dir, bool lead);

// Collective: the manifest of the checkpoint --resume names (an agreed
// error when any rank cannot read it); empty without --resume.
checkpoint_manifest read_resumed_manifest(const std::string& resume_from);

// The run as launched: `launched` (the flags over the spec), or resumed, the
// checkpoint's record (in its manifest m) with the flags given over it
// (collective: the warnings print on rank 0, a changed global batch not
// allowed is an error on every rank).
checkpoint_run resolve_run(const program& p, const train_options& o, const checkpoint_run& launched,
                           const std::string& resume_from, const checkpoint_manifest& m, bool lead);
