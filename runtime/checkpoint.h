// checkpoint: saving training state every N steps and resuming from it
// (collective over the world; format in runtime/files/checkpoint_files.h).
//
// Saving: each rank of the first replica writes its shards of every unit
// (fp32 weights and optimizer state) into DIR/step_N.partial; rank 0 gathers
// their checksums, writes the manifest and renames the directory to
// DIR/step_N only when every rank succeeded, then removes all but the newest
// `keep` checkpoints. A failure on any rank leaves earlier checkpoints as they
// were and is an error on every rank.
//
// Resuming restores every rank's shards by tensor name and global position,
// so a checkpoint written by another world size or wrap policy loads as long
// as the model's tensors and the optimizer agree; the loop continues at the
// saved step with the saved data position, loss scale and AdamW step count.
// Resuming with the same binary continues bit-exactly.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/files/checkpoint_files.h"
#include "runtime/loss_scale.h"
#include "runtime/step.h"

struct checkpoint_config {
  int64_t every = 0;  // steps between checkpoints (0: none)
  std::string dir;
  int64_t keep = 2;  // complete checkpoints kept (the newest)
};

// What the loop resumes besides the buffers.
struct checkpoint_state {
  int64_t step = 0;       // steps completed
  int64_t sequences = 0;  // global sequences consumed
  loss_scaler scaler;
  int64_t seed = 0;    // initialization seed of the run (recorded)
  std::string data;    // the data source, described (recorded)
  checkpoint_run run;  // the run as launched (saved; runtime/run_settings.h reads it back)
};

struct checkpoint_saved {
  std::string path;     // DIR/step_N
  int64_t bytes = 0;    // shard files together
  int64_t removed = 0;  // older checkpoints removed (keep)
};

// Collective. The persistent buffers must be host-visible behind c.device and
// c.host (backend::with_host_weights). Throws agreed_error on every rank when
// any rank failed.
checkpoint_saved checkpoint_save(step_context& c, const checkpoint_config& cfg,
                                 const checkpoint_state& s);

// Collective: fills this rank's persistent buffers from the checkpoint at dir
// (a step_N directory) and returns its state, the loss scaler as this program
// runs it (the saved scale and counts when both use fp16 scaling). Throws
// agreed_error naming the file and the problem (missing or corrupt files, a
// different model or optimizer).
checkpoint_state checkpoint_load(step_context& c, const std::string& dir);

// Whether checkpoints can be written in dir, checked before the first step:
// "" when dir is a writable directory (created first when `create`) or,
// without `create`, when it could be created (its nearest existing ancestor is
// a writable directory); otherwise why not, naming dir.
std::string checkpoint_dir_problem(const std::string& dir, bool create);

// The sequences consumed by the first `step` steps of this program's run.
inline int64_t checkpoint_sequences_per_step(const program& p) {
  return p.parallel.world * p.parallel.micro_batches * p.parallel.micro_batch;
}
