// watchdog: never a silent hang. Each stream says which op it runs
// (runtime/watch_status.h, which the backends write); a monitor thread per
// rank publishes that, with a heartbeat, to a small file in a job-shared
// watch directory (a side channel beside the blocked communicators), and when
// one of its ops outlasts the stall timeout composes one report from every
// rank's file, printed by the first rank to claim it, and ends the rank with
// exit code 3.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/program.h"
#include "runtime/watch_status.h"

// A rank that stalled exits with this status (0: done, 1: an error, 2: the
// flags or the launch are wrong).
inline constexpr int kStalledExitCode = 3;

// The op a rank's compute slot names while its main thread waits in a
// collective outside the schedule: the loss all-reduce after a step's ops,
// the straggler gather after it (--straggler-every).
inline constexpr int kWatchLossAllReduce = -2;
inline constexpr int kWatchStragglerGather = -3;
// ...while it writes its checkpoint shard (or waits for its writer thread to
// finish it), and while it waits in the checkpoint's agreement (the directory
// made, every shard written, the checksums gathered, the rename): a rank stuck
// in a file system is named as the one holding the others up.
inline constexpr int kWatchCheckpointWrite = -4;
inline constexpr int kWatchCheckpointAgree = -5;
// A checkpoint's limit: the stall timeout, or this rank's checkpoint bytes at
// this rate where that is longer (a slow shared file system's per-rank share).
inline constexpr double kWatchCheckpointBytesPerS = 50e6;

// While it lives, this rank's compute slot names `op` (one of the above),
// entered at now_ns (trace_clock_ns()).
class watch_outside_step : public watch_op_scope {
 public:
  watch_outside_step(int op, int64_t now_ns)
      : watch_op_scope(watch_process_status().streams[static_cast<int>(stream_id::compute)], op,
                       now_ns) {}
};

// One rank's published state: a fixed-size record in <watch dir>/rank_N,
// rewritten whole at every tick. Times are wall-clock ns (CLOCK_REALTIME).
struct watch_record {
  uint64_t magic = 0;
  int64_t sequence = 0;  // also in sequence_end: a record read torn has them differ
  int64_t rank = -1, pid = 0;
  char host[64] = {};
  int64_t step = -1, validation_pass = -1;
  int64_t heartbeat_ns = 0;
  int32_t op[kStreamCount] = {-1, -1, -1, -1, -1, -1};
  int64_t entered_ns[kStreamCount] = {};
  int64_t sequence_end = 0;
};
inline constexpr uint64_t kWatchRecordMagic = 0x3130686374617766ull;  // "fwatch01", little-endian

// The monitor's memory of the GPU's marks (watch_status::gpu_marks) from one
// tick to the next: each stream's mark, since when (trace_clock_ns) it has
// been that, and the run (watch_status::gpu_run) it was read in.
struct watch_gpu_view {
  int32_t op[kStreamCount] = {-1, -1, -1, -1, -1, -1};
  int64_t since_ns[kStreamCount] = {};
  int64_t run = -1;
};

// One tick's look at the marks of run `run` (kStreamCount words), at now_ns
// (trace_clock_ns) and now_wall_ns (the record's clock), into r: a stream's
// mark that changed since the last look, or is of another run (another
// instance of the op), entered now: tick-granular, as the limits are
// seconds. Where r already names an op of the stream (the host's side: the
// host worker's op, a host-synchronous collective) it keeps whichever has run
// longer, the one a stall would be in.
void watch_merge_gpu_marks(watch_gpu_view& v, const volatile int32_t* marks, int64_t run,
                           int64_t now_ns, int64_t now_wall_ns, watch_record& r);

// How the reporter sees a rank: its monitor answers (a fresh heartbeat),
// stopped answering (a stale one: a stopped or wedged process), its process
// is gone (same host, no such pid), or it never wrote a record.
enum class watch_liveness { answering, silent, dead, missing };

struct watch_view {
  watch_record record;
  watch_liveness liveness = watch_liveness::missing;
};

// What the ops' limits are made of: the stall timeout, and the bytes of
// this rank's checkpoint shard (checkpoint_shard_bytes, summed by the caller:
// the watchdog includes nothing of checkpoints), which size a checkpoint's.
struct watch_limits {
  double timeout_s = 60;
  int64_t checkpoint_bytes = 0;
};

// How long op `op` of p (or kWatchLossAllReduce) may run: the timeout, or
// kWatchPredictedFactor times the op's predicted time where that is longer
// (an op the cost model expects to take minutes is not stalled at one); a
// checkpoint's, the checkpoint bytes at kWatchCheckpointBytesPerS where that
// is longer.
inline constexpr double kWatchPredictedFactor = 20;
int64_t watch_op_limit_ns(const program& p, int op, const watch_limits& l);

// The stall report (several lines, each ending in a newline) from every
// rank's view at wall-clock time now_ns: which rank holds the others up and
// in which op of which step, where the others wait, then one line per rank.
// The rank held up is a dead one, else a silent one, else the one whose
// oldest running op is not a collective (else the oldest running op).
std::string watch_report(const program& p, const std::vector<watch_view>& ranks, int64_t now_ns,
                         const watch_limits& l);

struct watchdog_options {
  double stall_timeout_s = 60;  // a binary's: its spec's train.stall_timeout (or the flag's)
  std::string watch_dir;        // --watch-dir: the directory to create the job's in ("": chosen)
};

// Collective over MPI_COMM_WORLD: rank 0 creates the job's watch directory
// (under o.watch_dir; else /dev/shm when every rank is on this node, else
// the checkpoint directory's parent when checkpoints are written, else
// $TMPDIR, noted) and tells the others; every rank starts its monitor, whose
// checkpoints' limit checkpoint_bytes sizes. A directory that cannot be made
// is an agreed error naming it. The watchdog stops (and rank 0 removes the
// directory) when destroyed.
class watchdog {
 public:
  virtual ~watchdog() = default;
};
std::unique_ptr<watchdog> watchdog_start(const program& p, const watchdog_options& o, int64_t rank,
                                         int64_t world, int64_t local_size,
                                         const std::string& checkpoint_dir, bool checkpoints,
                                         int64_t checkpoint_bytes);

// --inject-stall RANK:STEP:SECONDS, checked against the world; "" when it
// reads, else why not.
struct watch_injected_stall {
  int64_t rank = -1, step = -1;
  double seconds = 0;
};
std::string watch_parse_injected_stall(const std::string& text, int64_t world,
                                       watch_injected_stall& out);
