// checkpoint: saving training state every N steps and resuming from it
// (collective over the world; format in runtime/files/checkpoint_files.h).
//
// Saving: each rank of the first replica writes its shards of every unit
// (fp32 weights and optimizer state) into DIR/step_N.partial; rank 0 gathers
// their checksums, writes the manifest and renames the directory to
// DIR/step_N only when every rank succeeded, then removes all but the newest
// `keep` checkpoints. A failure on any rank leaves earlier checkpoints as they
// were and is an error on every rank. checkpoint_save does all of it at once;
// checkpoint_writer stages the shards in the plan's host buffer and writes
// them behind the next steps, completing the rest at the next checkpoint.
//
// Resuming restores every rank's shards by tensor name and global position,
// so a checkpoint written by another world size or wrap policy loads as long
// as the model's tensors and the optimizer agree; the loop continues at the
// saved step with the saved data position, loss scale and AdamW step count.
// Resuming with the same binary continues bit-exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/files/checkpoint_files.h"
#include "runtime/step_context.h"
#include "runtime/train/loss_scale.h"

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
  // The loss-spike guard's window and its spikes in a row (runtime/train/guard.h).
  std::vector<double> guard_losses, guard_norms;
  int64_t guard_skips_in_row = 0;
  int64_t seed = 0;    // initialization seed of the run (recorded)
  std::string data;    // the data source, described (recorded)
  checkpoint_run run;  // the run as launched (saved; runtime/train/run_settings.h reads it back)
};

struct checkpoint_saved {
  std::string path;     // DIR/step_N
  int64_t bytes = 0;    // shard files together
  int64_t removed = 0;  // older checkpoints removed (keep)
  double write_s = 0;   // checkpoint_writer: this rank's writer thread's time on its shard file
};

// One section of a rank's shard file, in file order: per unit with a shard,
// its fp32 weights (master, or the params when they are fp32), then its
// optimizer state if it keeps any; each a whole persistent buffer.
struct checkpoint_part {
  int unit;
  int buffer;
  int64_t bytes;
  bool state;
  std::string what;  // "weights of NAME" or "optimizer state of NAME", for errors
  // optimizer = muon(...): the state is put together, not a buffer
  // (runtime/train/muon_checkpoint.h; buffer: the compacted AdamW state, or -1).
  bool muon = false;
};
std::vector<checkpoint_part> checkpoint_parts(const program& p);
// The bytes of a rank's shard file's sections: checkpoint_parts summed.
int64_t checkpoint_shard_bytes(const program& p);

// Collective. The persistent buffers must be host-visible behind c.device and
// c.host (backend::with_host_weights). Throws agreed_error on every rank when
// any rank failed.
checkpoint_saved checkpoint_save(step_context& c, const checkpoint_config& cfg,
                                 const checkpoint_state& s);

// Saving behind the steps, where the plan has a checkpoint staging buffer
// (the spec plans checkpoints). start() copies this rank's parts into the
// staging buffer at the step boundary, in shard file order, and a thread
// writes the shard file from there (and its checksums) while the next steps
// run; finish() joins it and completes the save as checkpoint_save does
// (checksums gathered to rank 0, manifest, rename, keep). Only the calling
// thread uses MPI. Until finish() the checkpoint is DIR/step_N.partial, which
// resume ignores and the next save removes: a process that dies meanwhile
// keeps the checkpoints completed before. The files are those checkpoint_save
// writes, byte for byte.
class checkpoint_writer {
 public:
  // Copies persistent buffer `buffer`, all of it, to host memory at `to`
  // (runtime/backend.h copy_to_host).
  using copy_to_host = std::function<void(int buffer, std::byte* to)>;

  // Throws (on every rank) if the plan's staging buffer is not exactly this
  // rank's parts.
  explicit checkpoint_writer(const program& p);
  // Waits for a write under way; its checkpoint stays .partial.
  ~checkpoint_writer();
  checkpoint_writer(const checkpoint_writer&) = delete;
  checkpoint_writer& operator=(const checkpoint_writer&) = delete;

  static bool available(const program& p);
  // Collective. Nothing may be pending (finish() first). Returns the
  // seconds it took (staging; the write follows behind).
  double start(step_context& c, const checkpoint_config& cfg, const checkpoint_state& s,
               const copy_to_host& copy);
  bool pending() const { return pending_; }
  int64_t pending_step() const { return state_.step; }
  // Collective: waits for the pending write and completes it; throws
  // agreed_error on every rank when any rank failed (the .partial removed).
  checkpoint_saved finish(step_context& c);

 private:
  const program& p_;
  const std::vector<checkpoint_part> parts_;
  std::vector<const std::byte*> from_;  // each part's place in the staging buffer
  checkpoint_config cfg_;
  checkpoint_state state_;
  std::string partial_;
  bool pending_ = false;
  std::thread thread_;
  // Written by the thread, read after joining it.
  std::vector<uint32_t> crcs_;
  std::string error_;
  double write_s_ = 0;
};

// Collective: fills this rank's persistent buffers from the checkpoint at dir
// (a step_N directory) whose manifest is m (checkpoint_manifest_read, read
// once at start-up) and returns its state, the loss scaler as this program
// runs it (the saved scale and counts when both use fp16 scaling). Throws
// agreed_error naming the file and the problem (missing or corrupt files, a
// different model or optimizer).
checkpoint_state checkpoint_load(step_context& c, const std::string& dir,
                                 const checkpoint_manifest& m);

// Whether checkpoints can be written in dir, checked before the first step:
// "" when dir is a writable directory (created first when `create`) or,
// without `create`, when it could be created (its nearest existing ancestor is
// a writable directory); otherwise why not, naming dir.
std::string checkpoint_dir_problem(const std::string& dir, bool create);
