// checkpoint_files: the on-disk form of a training checkpoint, read and
// written without MPI (the training binary and `fsdpgen merge` share it).
//
// A checkpoint is a directory DIR/step_NNNNNNNN holding manifest.json and one
// shard file per rank of a shard group (shard_00000.bin, ...; replicas of a
// hybrid or no_shard run hold equal shards and one of them writes). A shard
// file is, unit after unit, the rank's slice of the unit's flat parameter as
// fp32 weights (master weights, or the params when they are fp32) and then
// its optimizer state (AdamW: m then v; SGD with momentum: the momentum
// buffer), each slice `shard_elems` long with the unit's padding as zeros.
// The manifest holds what resuming needs besides the data: the model's unit
// and tensor layout (global shapes), the world it was written by, the step,
// the data position, the loss scaler, the run as launched (its flags), and
// every section's offset, size and CRC-32. It is written last, so a directory without one is
// incomplete; the directory is written as step_NNNNNNNN.partial and renamed when every rank
// finished.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointManifest = "manifest.json";

struct checkpoint_tensor {
  std::string name;            // Hugging Face GPT-2 name
  int64_t offset = 0;          // first element in the unit's flat parameter
  std::vector<int64_t> shape;  // global, row-major
  int64_t elems() const;
};

struct checkpoint_unit {
  std::string name;
  int64_t param_elems = 0;   // real elements of the flat parameter
  int64_t shard_elems = 0;   // per rank of the shard group (padded flat / shard group)
  int64_t state_planes = 0;  // optimizer state slices per shard: AdamW 2, SGD 1 or 0
  std::vector<checkpoint_tensor> tensors;
};

// A contiguous run of one shard file: one unit's weights or its optimizer state.
struct checkpoint_section {
  int unit = 0;
  std::string what;  // "weights" (fp32, shard_elems) or "state" (fp32, planes x shard_elems)
  int64_t offset = 0, bytes = 0;
  uint32_t crc32 = 0;
};

struct checkpoint_shard {
  std::string file;  // name inside the checkpoint directory
  int64_t bytes = 0;
  std::vector<checkpoint_section> sections;
};

// The run as it was launched (the binary's flags resolved over the spec's
// values), so that --resume continues the same run (runtime/train/run_settings.h).
// A list left empty means the spec's source.
struct checkpoint_run {
  int64_t steps = 0;              // the run's length: the lr schedule ends there
  std::vector<std::string> data;  // --data as given
  bool shuffle = false;
  std::vector<std::string> val;  // --val as given
  int64_t val_every = 0;         // 0: no validation
  int64_t val_sequences = 0;
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_keep = 1;
  int64_t log_every = 1;
  std::string save, metrics;  // --save and --metrics as given ("" none)
  // With the manifest's world, the global batch: world x micro_batch x
  // micro_batches sequences a step.
  int64_t micro_batch = 1, micro_batches = 1;
};

struct checkpoint_manifest {
  int version = kCheckpointVersion;
  std::string model, spec;
  int64_t step = 0;       // training steps completed
  int64_t sequences = 0;  // global sequences consumed (the data position)
  int64_t world = 1, shard_group = 1;
  std::string optimizer;  // "adamw" or "sgd"
  int64_t seed = 0;       // the run's initialization seed
  std::string data;       // the data source, as the run described it
  // The loss scaler (runtime/train/loss_scale.h).
  bool loss_scale_enabled = false;
  double loss_scale = 1;
  int64_t loss_scale_finite_steps = 0;
  int64_t applied_steps = 0;  // optimizer updates applied (AdamW's bias correction)
  // The loss-spike guard's window (runtime/train/guard.h), oldest first: the mean
  // losses and gradient norms of the last applied steps, and the spikes since
  // the last of them. Empty without a guard (and in older checkpoints).
  std::vector<double> guard_losses, guard_norms;
  int64_t guard_skips_in_row = 0;
  bool has_run = false;  // checkpoints written before the run was recorded lack it
  checkpoint_run run;
  std::vector<checkpoint_unit> units;
  std::vector<checkpoint_shard> shards;  // by shard rank
};

// The name of step's checkpoint directory inside dir: dir/step_00000100.
std::string checkpoint_step_dir(const std::string& dir, int64_t step);
// Where a step's checkpoint is written until it is complete: step_dir.partial.
std::string checkpoint_partial_dir(const std::string& step_dir);
// The complete checkpoints (with a manifest) directly inside dir, oldest first.
std::vector<std::string> checkpoint_list(const std::string& dir);
// The partial ones (step_N.partial) directly inside dir, oldest first: left
// by saves that did not finish.
std::vector<std::string> checkpoint_list_partial(const std::string& dir);
// What a --resume argument names: a checkpoint (it has manifest.json), or a
// directory of them (its newest). Throws naming the path when there is none.
std::string checkpoint_resolve(const std::string& path);

std::string checkpoint_manifest_text(const checkpoint_manifest& m);
// Reads and validates dir/manifest.json (format, version, fields, a shard per
// shard rank, sections inside their files in order). Throws std::runtime_error
// naming the file and the problem.
checkpoint_manifest checkpoint_manifest_read(const std::string& dir);

// CRC-32 (zlib's) of n bytes, continuing from crc (0 to start).
uint32_t checkpoint_crc32(uint32_t crc, const void* data, int64_t n);

// Reads a checkpoint's values by global position, whatever world wrote it:
// element i of a unit's flat parameter lives in shard i / shard_elems. Each
// section is read whole and its CRC checked the first time it is needed; the
// sections of one unit are kept until another unit is read.
class checkpoint_reader {
 public:
  checkpoint_reader(std::string dir, checkpoint_manifest manifest);
  ~checkpoint_reader();
  const checkpoint_manifest& manifest() const { return m_; }
  const std::string& dir() const { return dir_; }
  // out[0, end - begin) = elements [begin, end) of the unit's flat weights
  // (end <= param_elems), or of plane `plane` of its optimizer state.
  void weights(int unit, int64_t begin, int64_t end, float* out);
  void state(int unit, int plane, int64_t begin, int64_t end, float* out);

 private:
  void read(int unit, const char* what, int64_t plane, int64_t begin, int64_t end, float* out);
  const std::vector<float>& section(int shard, int unit, const char* what);
  std::string dir_;
  checkpoint_manifest m_;
  int cached_unit_ = -1;
  std::map<std::pair<int, std::string>, std::vector<float>>
      cache_;  // (shard, what) of cached_unit_
};
